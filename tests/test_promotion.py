"""Tests of promotion planning: the reference config, the gate, refusals.

No Ray and no training: `searches` (conftest.py) writes a finished search
directory by hand.
"""

import json
import math

import pytest
import yaml

from tan_tune import accounting
from tan_tune import cli
from tan_tune import promotion
from tan_tune import search
from tan_tune import triplet as triplet_lib
from tan_tune.errors import ConfigError

DIGITS_N = 1437


def test_the_reference_keeps_the_hyperparameters_at_b_ref_sigma_ref_s(
    searches, tmp_path):
  outcome = promotion.load_search_directory(searches.write(tmp_path))
  plan = promotion.plan_promotion(outcome)
  assert plan.trial["trial_id"] == "best"
  privacy = plan.config.privacy
  assert (privacy.batch_size, privacy.noise_multiplier, privacy.steps) == (
      512, 2.0419, 100)
  assert privacy.reference_batch_size is None and privacy.private
  assert plan.config.optim.lr == 2.0 and plan.config.optim.momentum == 0.5
  assert plan.compute_vs_trial == 8
  assert plan.privacy.epsilons["rdp"].epsilon == pytest.approx(7.9991, abs=1e-4)
  assert set(plan.privacy.epsilons) == set(accounting.ACCOUNTANTS)
  # 512 x 100 examples at the trial's 1000 per second.
  assert plan.estimated_seconds == pytest.approx(51.2)
  assert plan.scaling is None  # One batch size with these params.


def test_a_constant_eta_trial_promotes_to_its_own_triplet_and_lr(
    searches, tmp_path):
  directory = searches.write(tmp_path, rows=[searches.row("short", 0.9, steps=25)])
  space = yaml.safe_load((directory / search.SPACE_FILE).read_text())
  space["steps_grid"] = [25, 100]
  (directory / search.SPACE_FILE).write_text(yaml.safe_dump(space))
  plan = promotion.plan_promotion(promotion.load_search_directory(directory))
  # Table 3: S / 4 needs B x 2 at the same sigma, and lr x 4.
  assert plan.config.privacy.batch_size == 1024
  assert plan.config.privacy.noise_multiplier == 2.0419
  assert plan.config.privacy.steps == 25
  assert plan.config.optim.lr == pytest.approx(8.0)
  reference = triplet_lib.PrivacyTriplet(DIGITS_N, 512, 2.0419, 100)
  assert plan.triplet.eta == pytest.approx(reference.eta, rel=1e-3)


def test_gpus_follow_the_trials_share_by_batch_size(searches, tmp_path):
  directory = searches.write(tmp_path)
  space = yaml.safe_load((directory / search.SPACE_FILE).read_text())
  space["resources"] = {"gpu": 0, "gpu_by_batch_size": {64: 0.25}}
  (directory / search.SPACE_FILE).write_text(yaml.safe_dump(space))
  plan = promotion.plan_promotion(promotion.load_search_directory(directory))
  # The winner (B = 64) trained on a quarter of a GPU: its calibration runs
  # reserve as much, and each reference worker a whole GPU by default.
  assert plan.trial_gpus == 0.25 and plan.gpus_per_worker == 1.0
  assert promotion.plan_promotion(
      promotion.load_search_directory(directory),
      trial_id="next", gpus_per_worker=0).gpus_per_worker == 0


def test_a_named_trial_and_the_scaling_points_of_its_hyperparameters(
    searches, tmp_path):
  rows = [searches.row("a64", 0.85), searches.row("a32", 0.83, simulation_batch_size=32),
          searches.row("b64", 0.97, lr=4.0)]
  outcome = promotion.load_search_directory(searches.write(tmp_path, rows))
  plan = promotion.plan_promotion(outcome, trial_id="a64")
  assert plan.trial["trial_id"] == "a64"
  assert sorted(plan.scaling_points) == [(32, 0.83), (64, 0.85)]
  assert plan.scaling.slope == pytest.approx(0.02)
  assert plan.scaling.predict(512) == pytest.approx(0.85 + 3 * 0.02)
  calibrate = promotion.plan_promotion(outcome, trial_id="a64",
                                       calibrate=True)
  # B_ref / 64 and / 32 (8, 16); B_ref / 16 = 32 is already in the search.
  assert [p["simulation_batch_size"] for p in calibrate.calibration] == [8, 16]


def test_eps_over_the_target_is_refused(searches, tmp_path):
  outcome = promotion.load_search_directory(searches.write(tmp_path))
  with pytest.raises(promotion.PromotionRefused, match=r"eps = 7\.999.* > "
                     r"target 7\.5"):
    promotion.plan_promotion(outcome, target=7.5)


def test_sigma_below_two_is_refused(searches, tmp_path):
  outcome = promotion.load_search_directory(
      searches.write(tmp_path, noise_multiplier=1.5, target_epsilon=100))
  with pytest.raises(promotion.PromotionRefused, match=r"sigma_ref = 1\.5 < 2"):
    promotion.plan_promotion(outcome)


def test_no_budget_is_refused(searches, tmp_path):
  outcome = promotion.load_search_directory(
      searches.write(tmp_path, target_epsilon=None))
  with pytest.raises(promotion.PromotionRefused, match="no privacy budget"):
    promotion.plan_promotion(outcome)
  assert promotion.plan_promotion(outcome, target=8).target_epsilon == 8


def test_a_flag_may_tighten_the_budget_never_loosen_it(searches, tmp_path):
  outcome = promotion.load_search_directory(searches.write(tmp_path))
  with pytest.raises(ConfigError) as error:
    promotion.plan_promotion(outcome, target=9)
  assert error.value.field == "--target-epsilon"


@pytest.mark.parametrize("trial_id, message", [
    ("nope", "one of the search's finished trials: best"),
    ("broken", "a finished trial; this one failed"),
])
def test_an_unknown_or_unfinished_trial_is_refused(searches, tmp_path,
                                                   trial_id, message):
  rows = [searches.row("best", 0.96), searches.row("broken", None, status="failed")]
  outcome = promotion.load_search_directory(searches.write(tmp_path, rows))
  with pytest.raises(ConfigError, match=message) as error:
    promotion.plan_promotion(outcome, trial_id=trial_id)
  assert error.value.field == "--trial"


def test_a_search_with_no_finished_trial_has_nothing_to_promote(
    searches, tmp_path):
  rows = [searches.row("broken", None, status="failed")]
  outcome = promotion.load_search_directory(searches.write(tmp_path, rows))
  with pytest.raises(ConfigError, match="has none to promote"):
    promotion.plan_promotion(outcome)


def test_a_missing_or_unfinished_search_is_refused(searches, tmp_path):
  with pytest.raises(ConfigError, match="a search directory"):
    promotion.load_search_directory(tmp_path / "nothing")
  directory = searches.write(tmp_path)
  (directory / search.LEADERBOARD_FILE).unlink()
  with pytest.raises(ConfigError, match="--resume"):
    promotion.load_search_directory(directory)


def test_an_unknown_mlflow_run_is_refused(tmp_path):
  with pytest.raises(ConfigError, match="parent run") as error:
    promotion.load_search_run("0123", f"sqlite:///{tmp_path}/m.db", tmp_path)
  assert error.value.field == "--mlflow-run"


@pytest.mark.parametrize("argv, status, message", [
    (["--target-epsilon", "7.5"], 3, "refused: the reference run would spend"),
    (["--trial", "nope"], 2, "--trial: 'nope' is not allowed"),
    (["--workers", "0"], 2, "--workers"),
])
def test_the_cli_exits_non_zero_and_logs_nothing(searches, tmp_path, capsys,
                                                 argv, status, message):
  directory = searches.write(tmp_path)
  with pytest.raises(SystemExit) as exit_:
    cli.main(["promote", str(directory), *argv])
  assert exit_.value.code == status
  assert message in capsys.readouterr().err
  assert not (tmp_path / "mlflow.db").exists()  # No run was even opened.
  assert not (directory / "promote").exists()


def test_the_cli_refuses_a_missing_search(tmp_path, capsys):
  with pytest.raises(SystemExit) as exit_:
    cli.main(["promote", str(tmp_path / "gone")])
  assert exit_.value.code == 2
  assert "SEARCH_DIR" in capsys.readouterr().err


def test_plan_prints_the_triplet_epsilons_cost_and_starts_nothing(
    searches, tmp_path, capsys):
  directory = searches.write(tmp_path)
  assert cli.main(["promote", str(directory), "--plan"]) == 0
  out = capsys.readouterr().out
  for text in ("B = 512, sigma = 2.0419, S = 100", "eps (RDP) = 7.9991",
               "eps (PRV)", "eps (PLD)", "eps_TAN", "8x one trial",
               "estimated wall time: 0m51s", "predicted ema_test_accuracy"):
    assert text in out, text
  assert not (directory / "promote").exists()
  assert cli.main(["promote", str(directory), "--plan", "--json"]) == 0
  plan = json.loads(capsys.readouterr().out)
  assert plan["privacy"]["epsilon"]["rdp"]["adjacency"] == "add/remove-one"
  assert math.isclose(plan["target_epsilon"], 8)
