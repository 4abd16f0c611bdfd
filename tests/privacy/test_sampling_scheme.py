"""Tests of sampling schemes: names, caps and the accountants that cover them."""

import json

import pytest

from tan_tune.errors import ConfigError
from tan_tune.privacy.clipping_bound import JlBound
from tan_tune.privacy import accountant_registry
from tan_tune.privacy import samplers
from tan_tune.privacy import sampling_scheme
from tan_tune.privacy.sampling_scheme import POISSON, SamplingScheme


def test_each_scheme_names_its_default_accountant_first():
  assert SamplingScheme().accountants == ("rdp", "prv", "pld")
  assert SamplingScheme("truncated-poisson").default_accountant == "pld"
  assert SamplingScheme("fixed", "replace-one").accountants == (
      "rdp", "rdp-wang")


def test_caps_follow_the_sampler():
  assert SamplingScheme().cap(4096) is None
  assert SamplingScheme("truncated-poisson").cap(4096) == 4352  # B + 4 sqrt(B)
  assert SamplingScheme("truncated-poisson").cap(32768) == 33492
  assert SamplingScheme("truncated-poisson", truncation_stds=2).cap(4096) == (
      4224)
  assert SamplingScheme("fixed").cap(100) == 100
  assert SamplingScheme("fixed-with-replacement").cap(100) == 100


def test_descriptions_say_how_batches_are_drawn():
  assert SamplingScheme().describe(64) == "Poisson sampling at q = B/N"
  assert "truncated at 4352" in SamplingScheme("truncated-poisson").describe(
      4096)
  assert "without replacement" in SamplingScheme("fixed").describe(64)
  assert "with replacement" in SamplingScheme(
      "fixed-with-replacement").describe(64)


@pytest.mark.parametrize("kwargs, field", [
    ({"sampler": "shuffle"}, "sampling"),
    ({"adjacency": "substitute"}, "adjacency"),
    ({"sampler": "fixed-with-replacement", "adjacency": "replace-one"},
     "adjacency"),
    ({"sampler": "truncated-poisson", "truncation_stds": 0}, "truncation_stds"),
])
def test_bad_schemes_name_the_field(kwargs, field):
  with pytest.raises(ConfigError) as error:
    SamplingScheme(**kwargs)
  assert error.value.field == field


def test_an_accountant_outside_the_scheme_is_refused():
  with pytest.raises(ConfigError, match="accounted by pld"):
    SamplingScheme("truncated-poisson").require_accountant("rdp")


def test_jl_clipping_is_accounted_by_its_pld_mixture_only():
  jl = SamplingScheme(bound=JlBound(32))
  assert jl.accountants == ("pld-jl",)
  assert "JL clipping with 32 projections" in jl.describe(64)
  with pytest.raises(ConfigError, match="JL clipping with 32 projections"
                     r" \(RDP is infinite"):
    jl.require_accountant("rdp")


@pytest.mark.parametrize("kwargs", [
    {"sampler": "fixed"}, {"adjacency": "replace-one"},
    {"sampler": "truncated-poisson"},
])
def test_jl_clipping_needs_poisson_add_remove(kwargs):
  with pytest.raises(ConfigError) as error:
    SamplingScheme(bound=JlBound(10), **kwargs)
  assert error.value.field == "sampling"


def test_a_sampler_is_parsed_once_and_keeps_its_spelling():
  assert SamplingScheme("fixed").sampler is samplers.parse("fixed")
  assert SamplingScheme(samplers.Fixed()) == SamplingScheme("fixed")
  assert hash(SamplingScheme(samplers.Fixed())) == hash(
      SamplingScheme("fixed"))
  assert samplers.parse(POISSON.sampler) is POISSON.sampler
  assert [str(s) for s in samplers.registered()] == [
      "poisson", "truncated-poisson", "fixed", "fixed-with-replacement"]
  assert f"{samplers.TruncatedPoisson()}" == "truncated-poisson"
  assert json.dumps([samplers.FixedWithReplacement()]) == (
      '["fixed-with-replacement"]')
  with pytest.raises(ConfigError, match="expected one of poisson,"
                     " truncated-poisson, fixed, fixed-with-replacement"):
    samplers.parse("shuffle")


EXACT_TABLE = {  # The module docstring's table.
    ("poisson", "add/remove-one"): ("rdp", "prv", "pld"),
    ("poisson", "replace-one"): ("pld", "rdp"),
    ("truncated-poisson", "add/remove-one"): ("pld",),
    ("truncated-poisson", "replace-one"): ("pld",),
    ("fixed", "add/remove-one"): ("rdp",),
    ("fixed", "replace-one"): ("rdp", "rdp-wang"),
    ("fixed-with-replacement", "add/remove-one"): ("rdp",),
}


def test_the_coverage_table_gives_each_pair_its_accountants():
  for sampler in samplers.registered():
    for adjacency in sampling_scheme.ADJACENCIES:
      expected = EXACT_TABLE.get((str(sampler), adjacency))
      if expected is None:
        with pytest.raises(ConfigError):
          SamplingScheme(sampler, adjacency)
      else:
        assert SamplingScheme(sampler, adjacency).accountants == expected
  assert accountant_registry.offered_names() == (
      "rdp", "prv", "pld", "rdp-wang", "pld-jl")


def test_jl_coverage_composes_exact_runs_without_offering_for_them():
  jl = accountant_registry.named("pld-jl").coverage
  assert jl.covers(SamplingScheme()) and not jl.offered(SamplingScheme())
  assert jl.offered(SamplingScheme(bound=JlBound(8)))
  assert not jl.covers(SamplingScheme("fixed"))
  assert not accountant_registry.named("pld").coverage.covers(
      SamplingScheme(bound=JlBound(8)))
