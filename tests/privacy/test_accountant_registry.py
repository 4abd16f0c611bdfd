"""Tests of tan_tune.privacy.accountant_registry: accountants registered by
class, each declaring what it covers; a scheme's accountants derive from
them (the built-ins' table: `test_sampling_scheme.py`)."""

import pytest
import torch

from tan_tune.errors import ConfigError
from tan_tune.privacy import accountant_registry
from tan_tune.privacy import accounting
from tan_tune.privacy import run_accountants
from tan_tune.privacy import samplers
from tan_tune.privacy.accountant_registry import Coverage
from tan_tune.privacy.samplers import ADD_REMOVE, REPLACE_ONE
from tan_tune.privacy.sampling_scheme import SamplingScheme
from tan_tune.privacy.triplet import PrivacyTriplet


class _Bernoulli(samplers.Poisson):
  """Poisson sampling drawn another way: Poisson's mechanism."""

  name = "bernoulli"

  def draw(self, generator, dataset_size, rows, batch_size, cap):
    coins = torch.full((rows,), batch_size / dataset_size)
    return torch.bernoulli(coins, generator=generator).nonzero().flatten(), None


@pytest.fixture(name="registries")
def _registries(monkeypatch):
  """Both registries and rdp's coverage as they are, restored after."""
  monkeypatch.setattr(samplers, "_REGISTRY", dict(samplers._REGISTRY))  # pylint: disable=protected-access
  monkeypatch.setattr(accountant_registry, "_REGISTRY",
                      dict(accountant_registry._REGISTRY))  # pylint: disable=protected-access
  monkeypatch.setattr(run_accountants.Rdp, "coverage",
                      run_accountants.Rdp.coverage)
  samplers.register(_Bernoulli)


def test_an_uncovered_sampler_is_refused_until_an_accountant_covers_it(
    registries):
  del registries
  with pytest.raises(ConfigError) as error:
    SamplingScheme("bernoulli")
  assert error.value.field == "adjacency"
  run_accountants.Rdp.cover(_Bernoulli, ADD_REMOVE)
  scheme = SamplingScheme("bernoulli")
  assert scheme.accountants == ("rdp",)
  assert SamplingScheme().accountants == ("rdp", "prv", "pld")
  with pytest.raises(ConfigError, match="expected add/remove-one"):
    SamplingScheme("bernoulli", REPLACE_ONE)
  triplet = PrivacyTriplet(1000, 32, 1.5, 50)
  assert accounting.epsilon(triplet, scheme=scheme).epsilon == (
      accounting.epsilon(triplet).epsilon)  # Poisson's mechanism.


def test_a_registered_accountant_is_offered_where_it_declares(registries):
  del registries

  @accountant_registry.register
  class BernoulliPld(run_accountants.Pld):  # pylint: disable=unused-variable
    name = "pld-bernoulli"
    coverage = Coverage(frozenset({(_Bernoulli, ADD_REMOVE),
                                   (_Bernoulli, REPLACE_ONE)}))

  run_accountants.Rdp.cover(_Bernoulli, ADD_REMOVE)
  assert SamplingScheme("bernoulli").accountants == ("rdp", "pld-bernoulli")
  assert SamplingScheme("bernoulli", REPLACE_ONE).accountants == (
      "pld-bernoulli",)
  assert accountant_registry.offered_names()[-1] == "pld-bernoulli"
  assert "pld-bernoulli" not in SamplingScheme().accountants


def test_the_default_is_the_first_registered_unless_one_claims_it():
  assert SamplingScheme(adjacency=REPLACE_ONE).accountants == ("pld", "rdp")
  pld = accountant_registry.named("pld").coverage
  assert pld.default(SamplingScheme(adjacency=REPLACE_ONE))
  assert not pld.default(SamplingScheme())


def test_a_taken_name_is_refused(registries):
  del registries

  class Again(run_accountants.Rdp):
    name = "pld"

  with pytest.raises(ValueError, match="already registered as 'pld'"):
    accountant_registry.register(Again)
  assert isinstance(accountant_registry.named("pld"), run_accountants.Pld)


def test_an_unknown_name_is_a_one_line_error_naming_the_registered():
  with pytest.raises(ConfigError) as error:
    accountant_registry.named("moments")
  assert error.value.field == "accountant"
  assert error.value.allowed.startswith("expected one of rdp, prv, pld,")
  assert "rdp-repeat-and-select" in error.value.allowed
  assert len(str(error.value).splitlines()) == 1


def test_coverage_extends_to_known_adjacencies_only(registries):
  del registries
  with pytest.raises(ValueError, match="not substitute-one"):
    run_accountants.Rdp.cover(_Bernoulli, "substitute-one")
  assert (_Bernoulli, ADD_REMOVE) not in run_accountants.Rdp.coverage.cells
