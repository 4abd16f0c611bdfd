"""A DP sampler of one's own, added without touching the package: Poisson
sampling drawn with Bernoulli coins, registered with the accountants that
cover it, then accounted by `api.privacy` and `tan-tune privacy` and trained
a few private steps by `api.train`, charged to the ledger under its name.

Its mechanism is Poisson's (each example on its own coin of probability
q = B / N), so it inherits Poisson's RDP curve and PLD event: RDP's coverage
is extended to it for add/remove-one, and a PLD accountant of its own covers
it under both adjacencies."""

import json

import pytest
import torch

from tan_tune import api
from tan_tune.cli import main as cli
from tan_tune.ledger import ledger as ledger_lib
from tan_tune.privacy import accountant_registry
from tan_tune.privacy import accounting
from tan_tune.privacy import run_accountants
from tan_tune.privacy import samplers
from tan_tune.privacy.triplet import PrivacyTriplet
import mlflow_stores
import plugin_factories

NAME = "bernoulli-poisson"


class BernoulliPoisson(samplers.Poisson):
  """Each present row joins on a Bernoulli(q) coin: Poisson sampling."""

  name = NAME
  draws = 0  # Steps drawn in this process: training used this sampler.

  def describe(self, batch_size, cap):
    return "Poisson sampling at q = B/N, by Bernoulli coins"

  def draw(self, generator, dataset_size, rows, batch_size, cap):
    type(self).draws += 1
    coins = torch.full((rows,), batch_size / dataset_size)
    return torch.bernoulli(coins, generator=generator).nonzero().flatten(), None


class BernoulliPld(run_accountants.Pld):
  """dp_accounting's PLD of the sampler's own `pld_event`."""

  name = "pld-bernoulli"
  coverage = accountant_registry.Coverage(frozenset({
      (BernoulliPoisson, samplers.ADD_REMOVE),
      (BernoulliPoisson, samplers.REPLACE_ONE)}))


@pytest.fixture(scope="module", autouse=True)
def _registered():
  """Registered as a user's code would be, and unregistered afterwards so
  that other test files see the built-ins only."""
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(samplers, "_REGISTRY", dict(samplers._REGISTRY))  # pylint: disable=protected-access
    patch.setattr(accountant_registry, "_REGISTRY",
                  dict(accountant_registry._REGISTRY))  # pylint: disable=protected-access
    patch.setattr(run_accountants.Rdp, "coverage",
                  run_accountants.Rdp.coverage)
    samplers.register(BernoulliPoisson)
    accountant_registry.register(BernoulliPld)
    run_accountants.Rdp.cover(BernoulliPoisson, samplers.ADD_REMOVE)
    yield


def test_the_privacy_calculator_accounts_the_toy_sampler(capsys):
  report = api.privacy(50_000, 256, 1.2, 1000, sampling=NAME)
  poisson = api.privacy(50_000, 256, 1.2, 1000)
  assert report.as_dict()["sampler"] == NAME
  assert set(report.epsilons) == {"rdp", "pld-bernoulli"}
  # Poisson's mechanism: Poisson's numbers, under the toy's accountants.
  assert report.epsilon.epsilon == poisson.epsilons["rdp"].epsilon
  assert report.epsilons["pld-bernoulli"].epsilon == (
      poisson.epsilons["pld"].epsilon)
  assert "by Bernoulli coins" in report.epsilon.sampling

  assert cli.main(["privacy", "--dataset-size", "50000", "--batch-size",
                   "256", "--sigma", "1.2", "--steps", "1000", "--sampling",
                   f"{NAME},poisson", "--json"]) == 0
  result = json.loads(capsys.readouterr().out)
  assert result["reference"]["sampler"] == NAME
  assert [row["sampler"] for row in result["samplers"]] == [NAME, "poisson"]
  assert {(e["adjacency"], e["accountant"])
          for e in result["samplers"][0]["epsilon"]} == {
              ("add/remove-one", "rdp"), ("add/remove-one", "pld-bernoulli"),
              ("replace-one", "pld-bernoulli")}


def test_a_private_run_trains_and_is_charged_under_the_toy_sampler(tmp_path):
  uri = mlflow_stores.store(tmp_path)
  drawn = BernoulliPoisson.draws
  trained = api.train({
      "dataset": {"factory": plugin_factories.tabular_tensors},
      "model": {"factory": plugin_factories.tabular_mlp},
      "privacy": {"batch_size": 32, "noise_multiplier": 2.0, "steps": 4,
                  "sampling": NAME},
      "augment": {"family": "none"},
      "eval_every": 2, "device": "cpu",
  }, tracking_uri=uri, new_ledger=True, target_epsilon=50, progress=False)
  assert trained.config.privacy.sampling == NAME
  assert trained.metrics["private"] and trained.metrics["step"] == 4
  assert BernoulliPoisson.draws - drawn == 4
  [entry] = ledger_lib.Ledger(uri).entries()
  assert isinstance(entry.scheme.sampler, BernoulliPoisson)
  assert entry.as_dict()["sampler"] == NAME
  assert entry.epsilon == accounting.epsilon(
      PrivacyTriplet(entry.triplet.dataset_size, 32, 2.0, 4),
      entry.delta).epsilon  # Poisson's, by RDP.
