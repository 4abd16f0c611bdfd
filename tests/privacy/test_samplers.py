"""Tests of tan_tune.privacy.samplers: the registry of DP samplers and what
each built-in says of itself (their draws: `test_sampling.py`)."""

import json
import pickle

import numpy as np
import pytest
import torch

from tan_tune.errors import ConfigError
from tan_tune.privacy import mechanisms
from tan_tune.privacy import samplers
from tan_tune.privacy.samplers import ADD_REMOVE, REPLACE_ONE


class _Everyone(samplers.DpSampler):
  """A toy: every row, every step."""

  name = "everyone"
  independent_membership = True

  def cap(self, batch_size, truncation_stds):
    return None

  def describe(self, batch_size, cap):
    return "every row"

  def draw(self, generator, dataset_size, rows, batch_size, cap):
    return torch.arange(rows), None


@pytest.fixture(name="registry")
def _registry(monkeypatch):
  """The registry as it is, restored after the test."""
  monkeypatch.setattr(samplers, "_REGISTRY", dict(samplers._REGISTRY))  # pylint: disable=protected-access


def test_a_registered_sampler_is_parsed_from_its_name(registry):
  del registry
  assert samplers.register(_Everyone) is _Everyone
  everyone = samplers.parse("everyone")
  assert isinstance(everyone, _Everyone) and everyone == "everyone"
  assert samplers.parse(_Everyone()) is everyone
  assert samplers.names()[-1] == "everyone"
  assert samplers.registered()[-1] is everyone


def test_a_taken_name_is_refused(registry):
  del registry

  class Impostor(_Everyone):
    name = "poisson"

  before = samplers.registered()
  with pytest.raises(ValueError, match="already registered as 'poisson'"):
    samplers.register(Impostor)
  assert samplers.registered() == before
  assert isinstance(samplers.parse("poisson"), samplers.Poisson)


def test_a_sampler_that_cannot_draw_is_refused(registry):
  del registry

  class NoDraw(samplers.DpSampler):
    name = "no-draw"
    independent_membership = False

  with pytest.raises(TypeError, match="cap, describe, draw"):
    samplers.register(NoDraw)
  assert "no-draw" not in samplers.names()


@pytest.mark.parametrize("text", ["shuffle", "Poisson", 1, None, ["fixed"]])
def test_an_unknown_name_is_a_one_line_error_naming_the_allowed(text):
  with pytest.raises(ConfigError) as error:
    samplers.parse(text)
  assert error.value.field == "sampling" and error.value.value == text
  assert error.value.allowed == ("expected one of poisson, truncated-poisson,"
                                 " fixed, fixed-with-replacement")
  assert len(str(error.value).splitlines()) == 1


def test_a_sampler_is_its_spelling_wherever_it_goes():
  fixed = samplers.parse("fixed")
  assert str(fixed) == "fixed" and type(str(fixed)) is str
  assert json.dumps({"sampler": fixed}) == '{"sampler": "fixed"}'
  assert pickle.loads(pickle.dumps(fixed)) == fixed
  assert sorted(samplers.registered()) == [
      "fixed", "fixed-with-replacement", "poisson", "truncated-poisson"]


def test_only_poisson_samplers_let_examples_join_independently():
  assert {str(s): s.independent_membership for s in samplers.registered()} == {
      "poisson": True, "truncated-poisson": True, "fixed": False,
      "fixed-with-replacement": False}


def test_each_sampler_gives_its_own_rdp_curves():
  poisson, truncated, fixed, fswr = samplers.registered()
  assert np.array_equal(poisson.rdp_per_step(ADD_REMOVE, 1000, 10, 2.0),
                        mechanisms.poisson_rdp(0.01, 2.0))
  assert np.array_equal(poisson.rdp_per_step(REPLACE_ONE, 1000, 10, 2.0),
                        mechanisms.poisson_replace_one_rdp(0.01, 2.0))
  assert np.array_equal(fixed.rdp_per_step(ADD_REMOVE, 1000, 10, 2.0),
                        mechanisms.fswor_add_remove_rdp(0.01, 2.0))
  assert fswr.rdp_lower_bound(1000, 10, 2.0) is not None
  assert fixed.rdp_lower_bound(1000, 10, 2.0) is None
  with pytest.raises(NotImplementedError, match="no RDP curve"):
    truncated.rdp_per_step(ADD_REMOVE, 1000, 10, 2.0)
  with pytest.raises(NotImplementedError, match="no PLD event"):
    fixed.pld_event(1000, 10, 2.0, 10)
