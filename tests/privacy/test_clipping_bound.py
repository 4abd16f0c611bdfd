"""Tests of clipping bounds: what each promises the accountant."""

import pytest

from tan_tune.errors import ConfigError
from tan_tune.privacy import clipping_bound
from tan_tune.privacy import jl_accounting
from tan_tune.privacy.clipping_bound import EXACT, JlBound
from tan_tune.privacy.sampling_scheme import SamplingScheme

SAMPLERS_OWN = ("rdp", "prv", "pld")


def test_exact_clipping_keeps_the_samplers_accountants_and_adds_nothing():
  assert EXACT.exact and EXACT.projections is None
  assert SamplingScheme(bound=EXACT).accountants == SAMPLERS_OWN
  assert EXACT.describe() == "" and EXACT.cli_flags() == ""
  assert EXACT.floor(0.3, 2.0, 1e-5) is None
  SamplingScheme("fixed", "replace-one", bound=EXACT)  # Any sampler.


def test_jl_clipping_has_its_own_accountant_floor_and_flags():
  jl = JlBound(32)
  assert not jl.exact
  assert SamplingScheme(bound=jl).accountants == ("pld-jl",)
  assert jl.describe() == ", JL clipping with 32 projections"
  assert jl.cli_flags() == " --clipping jl --jl-projections 32"
  assert jl.floor(0.3, 2.0, 1e-5) == jl_accounting.jl_floor(0.3, 2.0, 1e-5, 32)
  assert "r = 32" in jl.infinite_epsilon_reason()


@pytest.mark.parametrize("projections", [0, -1, 2.5, True])
def test_jl_clipping_needs_an_integer_r(projections):
  with pytest.raises(ConfigError) as error:
    JlBound(projections)
  assert error.value.field == "jl_projections"


def test_jl_clipping_is_refused_outside_poisson_add_remove():
  with pytest.raises(ConfigError, match="poisson sampling under add/remove"):
    SamplingScheme("fixed", "add/remove-one", bound=JlBound(8))


def test_a_bound_round_trips_through_its_params_as_mlflow_keeps_them():
  for bound in (EXACT, JlBound(16)):
    as_strings = {k: str(v) for k, v in bound.params().items()}
    assert clipping_bound.from_params(as_strings) == bound
  assert clipping_bound.from_params({}) == EXACT  # Entries before JL.
