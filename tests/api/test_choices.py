"""The calculator's spellings (`api/choices.py`): what each becomes."""

import pytest

from tan_tune import api
from tan_tune.errors import ConfigError


def test_each_clipping_is_its_spelling():
  assert api.CLIPPINGS == ("exact", "jl")
  assert [api.Clipping(text) for text in api.CLIPPINGS] == list(api.Clipping)
  assert str(api.Clipping.JL) == "jl"


def test_only_jl_estimates_norms_from_projections():
  assert api.Clipping.JL.projected and not api.Clipping.EXACT.projected


def test_a_sampler_is_parsed_once_from_its_spelling():
  parsed = [api.parse_sampler(text) for text in api.sampler_names()]
  assert all(isinstance(sampler, api.DpSampler) for sampler in parsed)
  assert parsed == list(api.sampler_names())  # Each is its spelling.
  assert api.parse_sampler("fixed") is api.parse_sampler(
      api.parse_sampler("fixed"))
  assert api.DEFAULT_SAMPLER is api.parse_sampler("poisson")
  with pytest.raises(ConfigError) as error:
    api.parse_sampler("shuffled")
  assert error.value.field == "sampling"


def test_the_accountants_begin_with_the_papers():
  names = api.accountant_names()
  assert names[0] == "rdp" and "pld-jl" in names
