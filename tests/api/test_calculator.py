"""`api.privacy` and `api.calculate` (`api/calculator.py`): one triplet's
report, and everything `tan-tune privacy` shows as data. (What the command
prints of it: `test_cli_privacy.py`.)"""

import json

import pytest

from tan_tune import api
from tan_tune.cli import main as cli
from tan_tune.errors import ConfigError

CIFAR = (50_000, 4096, 3.0, 2500)


def test_the_privacy_calculator_reports_every_accountant():
  report = api.privacy(455, 128, 2.5, 60, delta=1e-3)
  assert isinstance(report, api.PrivacyReport)
  assert report.epsilons["rdp"].epsilon == pytest.approx(3.302, abs=1e-3)
  assert set(report.epsilons) == {"rdp", "prv", "pld"}
  fixed = api.privacy(455, 128, 2.5, 60, delta=1e-3, sampling="fixed")
  assert fixed.scheme.sampler == "fixed"
  with pytest.raises(ConfigError) as error:
    api.privacy(455, 128, 2.5, 60, sampling="shuffled")
  assert error.value.field == "sampling"


def test_the_reference_is_the_triplets_report():
  result = api.calculate(*CIFAR, delta=1e-5)
  assert result["reference"] == api.privacy(*CIFAR, delta=1e-5).as_dict()
  assert result["simulations"] == [] and "samplers" not in result


def test_it_is_what_the_command_prints_as_json(capsys):
  assert cli.main(["privacy", "--dataset-size", "50000", "--batch-size",
                   "4096", "--steps", "2500", "--target-epsilon", "8",
                   "--sampling", "poisson,fixed", "--simulate-batch-size",
                   "256", "--json"]) == 0
  printed = json.loads(capsys.readouterr().out)
  assert printed == json.loads(json.dumps(api.calculate(
      50_000, 4096, None, 2500, target_epsilon=8,
      sampling=["poisson", "fixed"], simulate_batch_sizes=[256])))
  calibration = printed["calibration"]
  assert calibration["sampler"] == "poisson"
  assert printed["reference"]["noise_multiplier"] == (
      calibration["noise_multiplier"])
  assert [row["sampler"] for row in printed["samplers"]] == [
      "poisson", "fixed"]


def test_sigma_is_needed_without_a_target():
  with pytest.raises(ConfigError) as error:
    api.calculate(50_000, 4096, None, 2500)
  assert error.value.field == "noise_multiplier"


@pytest.mark.parametrize("sampler, clipping, accounted", [
    ("poisson", api.Clipping.EXACT, True),
    (api.DEFAULT_SAMPLER, api.Clipping.JL, False),
    ("truncated-poisson", api.Clipping.EXACT, False),
    ("fixed", api.Clipping.EXACT, False),
])
def test_a_private_search_is_priced_for_poisson_and_exact_clipping(
    sampler, clipping, accounted):
  assert api.private_search_accounted(sampler, clipping) is accounted


@pytest.mark.parametrize("options, field", [
    ({"private_search": [10], "trial_shapes": [-1.5]}, "trial_shapes"),
    ({"private_search": [10], "score_noise": 0.0}, "score_noise"),
    ({"score_noise": 20.0}, "score_noise"),  # Without a search to score.
])
def test_a_private_search_s_options_are_checked_first(options, field):
  with pytest.raises(ConfigError) as error:
    api.calculate(*CIFAR, delta=1e-5, **options)
  assert error.value.field == field


def test_a_private_search_is_priced_at_the_etas_asked_for():
  result = api.calculate(*CIFAR, delta=1e-5, private_search=[10],
                         trial_shapes=[0.25], score_noise=20.0)
  [row] = result["private_search"]
  assert row["score_noise"] == 20.0 and row["most_room"] is None
  assert [(s["distribution"], s["eta"]) for s in row["searches"]] == [
      ("negative_binomial", 0.25), ("poisson", None)]
