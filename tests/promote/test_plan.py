"""Tests of promotion planning: the reference config, the gate, refusals.

No Ray and no training: `searches` (conftest.py) writes a finished search
directory by hand.
"""

import json
import math

import pytest

from tan_tune.cli import main as cli
from tan_tune.errors import ConfigError
from tan_tune.ledger import ledger as ledger_lib
from tan_tune.privacy import accounting
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.privacy.clipping_bound import JlBound
from tan_tune.privacy.sampling_scheme import POISSON, SamplingScheme
from tan_tune.promote import attempts
from tan_tune.promote import gate
from tan_tune.promote import plan as promotion
from tan_tune.promote import search_outcome
from tan_tune.search import search_files
from tan_tune.search import space as search_space
from tan_tune.search import trial_record
import digits_data
import mlflow_stores

DIGITS_N = 1437


def test_the_reference_keeps_the_hyperparameters_at_b_ref_sigma_ref_s(
    searches, tmp_path):
  outcome = search_outcome.load_search_directory(searches.write(tmp_path))
  plan = promotion.plan_promotion(outcome)
  assert plan.trial["trial_id"] == "best"
  privacy = plan.config.privacy
  assert (privacy.batch_size, privacy.noise_multiplier, privacy.steps) == (
      512, 2.0555, 100)
  assert privacy.reference_batch_size is None and privacy.private
  assert plan.config.optim.lr == 2.0 and plan.config.optim.momentum == 0.5
  assert plan.compute_vs_trial == 8
  assert plan.privacy.epsilons["rdp"].epsilon == pytest.approx(7.9266, abs=1e-4)
  assert set(plan.privacy.epsilons) == set(POISSON.accountants)
  # Timed on a synthetic twin: every step, every evaluation.
  assert plan.time.steps == 100 and plan.time.per_worker_batch == 512
  assert plan.time.step_seconds > 0 and plan.time.evaluations >= 1
  assert plan.scaling is None  # One batch size with these params.


def test_a_constant_eta_trial_promotes_to_its_own_triplet_and_lr(
    searches, tmp_path):
  directory = searches.write(tmp_path,
                             rows=[searches.row("short", 0.9, steps=25)],
                             space_fields={"steps_grid": [25, 100]})
  plan = promotion.plan_promotion(search_outcome.load_search_directory(directory))
  # Table 3: S / 4 needs B x 2 at the same sigma, and lr x 4.
  assert plan.config.privacy.batch_size == 1024
  assert plan.config.privacy.noise_multiplier == 2.0555
  assert plan.config.privacy.steps == 25
  assert plan.config.optim.lr == pytest.approx(8.0)
  reference = triplet_lib.PrivacyTriplet(DIGITS_N, 512, 2.0555, 100)
  assert plan.triplet.eta == pytest.approx(reference.eta, rel=1e-3)


def test_gpus_follow_the_trials_share_by_batch_size(searches, tmp_path):
  directory = searches.write(tmp_path, space_fields={
      "resources": {"gpu": 0, "gpu_by_batch_size": {64: 0.25}}})
  plan = promotion.plan_promotion(search_outcome.load_search_directory(directory))
  # The winner (B = 64) trained on a quarter of a GPU: its calibration runs
  # reserve as much, and each reference worker a whole GPU by default.
  assert plan.trial_gpus == 0.25 and plan.gpus_per_worker == 1.0
  assert promotion.plan_promotion(
      search_outcome.load_search_directory(directory),
      trial_id="next", gpus_per_worker=0).gpus_per_worker == 0


def test_the_fit_excludes_the_selected_score(searches, tmp_path, capsys):
  """The winner's score is the best of the search (winner's curse): only
  its hyper-parameters' runs at other batch sizes are fitted."""
  rows = [searches.row("a64", 0.99),
          searches.row("a32", 0.83, simulation_batch_size=32),
          searches.row("a16", 0.82, simulation_batch_size=16),
          searches.row("b64", 0.97, lr=4.0)]
  directory = searches.write(tmp_path, rows)
  outcome = search_outcome.load_search_directory(directory)
  plan = promotion.plan_promotion(outcome, trial_id="a64")
  assert plan.trial["trial_id"] == "a64"
  assert sorted(plan.scaling_points) == [(16, 0.82), (32, 0.83)]
  # Two batch sizes cannot choose a law: the default predicts, through both.
  assert plan.scaling.law == "inverse"
  slope = (0.83 - 0.82) / (1 / 32 - 1 / 16)
  assert plan.scaling.predict(512) == pytest.approx(
      0.83 + slope * (1 / 512 - 1 / 32))
  # Scored on the digits test split: its binomial noise widens the interval.
  assert plan.scaling.held_out_size == plan.held_out_size == 360
  [line] = [f for f in plan.scaling.alternatives if f.law == "log-linear"]
  assert line.slope == pytest.approx(0.01)
  assert line.predict(512) == pytest.approx(0.83 + 4 * 0.01)
  calibrate = promotion.plan_promotion(outcome, trial_id="a64",
                                       calibrate=True)
  # 16 and 32 again: the search scored them on validation, calibration
  # scores them as the promoted run will be.
  assert [p["simulation_batch_size"] for p in calibrate.calibration] == [
      8, 16, 32]
  # One set of calibration runs costs (8 + 16 + 32) / 512 = 7/64 of the
  # reference run's examples; replicate seeds multiply it.
  assert calibrate.calibration_seeds == 1
  assert calibrate.calibration_vs_reference == 7 / 64
  assert cli.main(["promote", str(directory), "--trial", "a64",
                   "--plan"]) == 0
  out = capsys.readouterr().out
  assert "the winner's search score 0.9900 (on validation" in out
  assert (", by the inverse law (fewer than 4 batch sizes cannot choose"
          in out)
  assert "90% interval [" in out and "the interval: from no gain" in out
  assert ("laws, by leave-one-out backtest error: log-linear 0.8700 (error"
          " n/a, too few points);") in out
  assert "largest 0.8300 (error 0.0100)" in out


def test_without_a_fit_the_plan_expects_constant_or_falling_accuracy(
    searches, tmp_path, capsys):
  directory = searches.write(tmp_path)
  assert cli.main(["promote", str(directory), "--plan"]) == 0
  out = capsys.readouterr().out
  assert "constant or falling with B" in out
  assert "or more" not in out


def test_eps_over_the_target_is_refused(searches, tmp_path):
  outcome = search_outcome.load_search_directory(searches.write(tmp_path))
  with pytest.raises(gate.PromotionRefused, match=r"eps = 7\.9266 > "
                     r"target 7\.5"):
    promotion.plan_promotion(outcome, target=7.5)


def test_sigma_below_two_is_refused(searches, tmp_path):
  outcome = search_outcome.load_search_directory(
      searches.write(tmp_path, noise_multiplier=1.5, target_epsilon=100))
  with pytest.raises(gate.PromotionRefused, match=r"sigma_ref = 1\.5 < 2"):
    promotion.plan_promotion(outcome)


def test_no_budget_is_refused(searches, tmp_path):
  outcome = search_outcome.load_search_directory(
      searches.write(tmp_path, target_epsilon=None))
  with pytest.raises(gate.PromotionRefused, match="no privacy budget"):
    promotion.plan_promotion(outcome)
  assert promotion.plan_promotion(outcome, target=8).target_epsilon == 8


def test_a_flag_may_tighten_the_budget_never_loosen_it(searches, tmp_path):
  outcome = search_outcome.load_search_directory(searches.write(tmp_path))
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
  outcome = search_outcome.load_search_directory(searches.write(tmp_path, rows))
  with pytest.raises(ConfigError, match=message) as error:
    promotion.plan_promotion(outcome, trial_id=trial_id)
  assert error.value.field == "--trial"


def test_a_search_with_no_finished_trial_has_nothing_to_promote(
    searches, tmp_path):
  rows = [searches.row("broken", None, status="failed")]
  outcome = search_outcome.load_search_directory(searches.write(tmp_path, rows))
  with pytest.raises(ConfigError, match="has none to promote"):
    promotion.plan_promotion(outcome)


def test_a_missing_or_unfinished_search_is_refused(searches, tmp_path):
  with pytest.raises(ConfigError, match="a search directory"):
    search_outcome.load_search_directory(tmp_path / "nothing")
  directory = searches.write(tmp_path)
  (directory / search_files.LEADERBOARD_FILE).unlink()
  with pytest.raises(ConfigError, match="--resume"):
    search_outcome.load_search_directory(directory)


def test_an_unknown_mlflow_run_is_refused(tmp_path, migrated_mlflow_db):
  with pytest.raises(ConfigError, match="parent run") as error:
    search_outcome.load_search_run("0123", migrated_mlflow_db, tmp_path)
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


def test_the_cli_refuses_a_search_an_older_version_wrote(searches, tmp_path,
                                                       capsys):
  directory = searches.write(tmp_path)
  (directory / search_files.RESOLVED_FILE).unlink()
  with pytest.raises(SystemExit) as exit_:
    cli.main(["promote", str(directory)])
  assert exit_.value.code == 2
  err = capsys.readouterr().err
  assert "SEARCH_DIR" in err and "resolved.json" in err
  assert "Traceback" not in err


def test_plan_prints_the_triplet_epsilons_cost_and_starts_nothing(
    searches, tmp_path, capsys):
  directory = searches.write(tmp_path)
  assert cli.main(["promote", str(directory), "--plan"]) == 0
  out = capsys.readouterr().out
  for text in ("B = 512, sigma = 2.0555, S = 100", "eps (RDP) = 7.9266",
               "eps (PRV)", "eps (PLD)", "eps_TAN", "8x one trial",
               "estimated wall time: ", "100 steps x ", "predicted ema_accuracy",
               "privacy ledger of digits", "no earlier private run"):
    assert text in out, text
  assert not (directory / "promote").exists()
  assert cli.main(["promote", str(directory), "--plan", "--json"]) == 0
  plan = json.loads(capsys.readouterr().out)
  assert plan["privacy"]["epsilon"]["rdp"]["adjacency"] == "add/remove-one"
  assert math.isclose(plan["target_epsilon"], 8)
  time = plan["time_estimate"]
  assert time["steps"] == 100 and time["per_worker_batch"] == 512
  assert time["total_seconds"] == pytest.approx(
      time["ray_start_seconds"] + time["train_start_seconds"]
      + time["training_seconds"] + time["finish_seconds"])


def test_a_private_run_refuses_delta_above_one_over_n(searches, tmp_path):
  with pytest.raises(ConfigError) as error:
    promotion.plan_promotion(search_outcome.load_search_directory(
        searches.write(tmp_path, delta=1e-3)))
  assert error.value.field == "reference.delta"
  assert f"1/N = {1 / DIGITS_N:.4g}" in error.value.allowed


def test_the_reference_run_trains_on_everything_and_reports_test(
    searches, tmp_path):
  plan = promotion.plan_promotion(
      search_outcome.load_search_directory(searches.write(tmp_path)))
  assert plan.config.validation_fraction == 0
  run = trial_record.build(plan.outcome.resolved, plan.trial["params"]).config
  assert run.validation_fraction == (
      search_space.DEFAULT_VALIDATION_FRACTION)


def _charge(tmp_path, plan):
  """What promote leaves once it has charged a plan: the entry, and its
  attempt in the promotion's state file."""
  ledger_lib.Ledger(mlflow_stores.store(tmp_path)).reserve(
      plan.ledger_entry)
  attempts.write_state(
      attempts.folder(plan.outcome.directory, plan.trial["trial_id"]),
      {"attempt": plan.ledger_entry.promotion.rsplit("/", 1)[1],
       "run_id": None})


@pytest.mark.usefixtures("migrated_mlflow_db")
def test_the_ledger_refuses_a_second_full_budget_run_on_the_same_data(
    searches, tmp_path, capsys):
  """Another trial, and another search on the same data: the same budget."""
  first = promotion.plan_promotion(
      search_outcome.load_search_directory(searches.write(tmp_path)))
  _charge(tmp_path, first)
  outcome = search_outcome.load_search_directory(tmp_path / "runs" / "digits")
  with pytest.raises(gate.PromotionRefused,
                     match=r"already spent eps = 7\.9266 in .* > its budget 8"):
    promotion.plan_promotion(outcome, trial_id="next")
  other = tmp_path / "other"
  other.mkdir()
  # Another split of the same people.
  directory = searches.write(other, space_fields={
      "dataset": {"name": "digits", "seed": 3}})
  state = json.loads((directory / search_files.STATE_FILE).read_text())
  state["tracking_uri"] = mlflow_stores.store(tmp_path)
  state["parent_run_id"] = "another-search"
  (directory / search_files.STATE_FILE).write_text(json.dumps(state))
  with pytest.raises(SystemExit) as exit_:
    cli.main(["promote", str(directory)])
  assert exit_.value.code == 3
  assert "already spent" in capsys.readouterr().err
  # The same promotion again is the same charge: it is never counted twice.
  assert promotion.plan_promotion(outcome).ledger.total.epsilon == (
      pytest.approx(first.ledger.total.epsilon))


@pytest.mark.usefixtures("migrated_mlflow_db")
def test_the_ledger_accepts_runs_the_budget_allows_together(searches,
                                                           tmp_path, capsys):
  # sigma 4 spends about eps 3.3 per run: two compose within a budget of 8.
  directory = searches.write(tmp_path, noise_multiplier=4.0)
  first = promotion.plan_promotion(search_outcome.load_search_directory(directory))
  _charge(tmp_path, first)
  second = promotion.plan_promotion(search_outcome.load_search_directory(directory),
                                    trial_id="next")
  assert len(second.ledger.earlier) == 1
  own = second.privacy.epsilons["rdp"].epsilon
  assert own < second.ledger.total.epsilon < 2 * own <= 8
  assert cli.main(["promote", str(directory), "--trial", "next",
                   "--plan"]) == 0
  assert "1 earlier private run(s)" in capsys.readouterr().out
  assert cli.main(["ledger", "--tracking-uri",
                   mlflow_stores.store(tmp_path)]) == 0
  listing = capsys.readouterr().out
  assert "dataset digits" in listing and "1 private run(s)" in listing


@pytest.mark.usefixtures("migrated_mlflow_db")
def test_the_plan_and_printed_ledger_show_a_ledger_id_never_a_digest(
    searches, tmp_path, capsys):
  """The unkeyed fingerprint of the examples, a membership oracle, was the
  promoted run's `dataset_identity` param and 12 hex digits of it were
  printed: people now see the data's name and its random ledger id."""
  directory = searches.write(tmp_path, noise_multiplier=4.0)
  first = promotion.plan_promotion(
      search_outcome.load_search_directory(directory))
  assert first.ledger_id is None  # Not charged yet.
  _charge(tmp_path, first)
  second = promotion.plan_promotion(
      search_outcome.load_search_directory(directory), trial_id="next")
  uri = mlflow_stores.store(tmp_path)
  charged, = ledger_lib.Ledger(uri).entries()
  params = second.as_dict()
  assert params["dataset_ledger_id"] == second.ledger_id == charged.ledger_id
  assert "dataset_identity" not in json.dumps(params, default=str)
  assert cli.main(["promote", str(directory), "--trial", "next",
                   "--plan"]) == 0
  assert cli.main(["ledger", "--tracking-uri", uri]) == 0
  assert cli.main(["ledger", "--tracking-uri", uri, "--json"]) == 0
  printed = capsys.readouterr().out
  assert f"(ledger {charged.ledger_id})" in printed
  assert not digits_data.leaked_windows(
      json.dumps(params, default=str) + printed)


@pytest.mark.slow
@pytest.mark.parametrize("sampler, accountant, cap", [
    ("fixed", "rdp", 512), ("truncated-poisson", "pld", 512 + 90)])
def test_the_search_files_sampler_reaches_the_run_gate_and_ledger(
    searches, tmp_path, capsys, sampler, accountant, cap):
  scheme = SamplingScheme(sampler)
  # Within eps 8 and above the gate's sigma >= 2.
  sigma = max(2.05, round(accounting.calibrate_sigma(
      DIGITS_N, 512, 100, 8.0, scheme=scheme) + 0.01, 2))
  directory = searches.write(tmp_path, sampling=sampler, noise_multiplier=sigma)
  plan = promotion.plan_promotion(search_outcome.load_search_directory(directory))
  assert plan.config.privacy.scheme == scheme
  assert set(plan.privacy.epsilons) == set(scheme.accountants)
  assert plan.privacy.epsilon.accountant == accountant
  assert plan.privacy.epsilon.epsilon <= 8
  assert plan.ledger_entry.scheme == scheme
  assert plan.peak_batch()["max_batch_size"] == cap
  assert cli.main(["promote", str(directory), "--plan"]) == 0
  out = capsys.readouterr().out
  assert f"at most {cap:,} examples a step" in out
  assert scheme.describe(512) in out
  _charge(tmp_path, plan)
  [entry] = ledger_lib.Ledger(mlflow_stores.store(tmp_path)).entries()
  assert entry.scheme == scheme  # Read back from MLflow.
  # Two full-budget runs do not fit: refused under the matching composition.
  assert f"{accountant.upper()} composition" in str(
      pytest.raises(gate.PromotionRefused, promotion.plan_promotion,
                    search_outcome.load_search_directory(directory),
                    trial_id="next").value)


@pytest.mark.slow  # PLD-JL accounting: seconds per epsilon.
@pytest.mark.usefixtures("migrated_mlflow_db")
def test_a_jl_search_promotes_under_its_own_accountant(searches, tmp_path,
                                                      capsys):
  directory = searches.write(
      tmp_path, space_fields={"clipping": "jl", "jl_projections": 32})
  plan = promotion.plan_promotion(search_outcome.load_search_directory(directory))
  scheme = SamplingScheme(bound=JlBound(32))
  assert (plan.config.clipping, plan.config.privacy.scheme) == ("jl", scheme)
  assert set(plan.privacy.epsilons) == {"pld-jl"}  # Never RDP.
  assert 7 < plan.privacy.epsilon.epsilon <= 8
  assert 0 < plan.privacy.jl_floor < plan.privacy.epsilon.epsilon
  assert cli.main(["promote", str(directory), "--plan"]) == 0
  out = capsys.readouterr().out
  assert "PLD-JL" in out and scheme.describe(512) in out
  _charge(tmp_path, plan)
  [entry] = ledger_lib.Ledger(mlflow_stores.store(tmp_path)).entries()
  assert entry.scheme == scheme  # Read back from MLflow.
  assert "PLD-JL composition" in str(
      pytest.raises(gate.PromotionRefused, promotion.plan_promotion,
                    search_outcome.load_search_directory(directory),
                    trial_id="next").value)


def test_jl_with_too_few_projections_is_refused_never_given_a_number(
    searches, tmp_path):
  directory = searches.write(
      tmp_path, target_epsilon=None,
      space_fields={"clipping": "jl", "jl_projections": 4})
  with pytest.raises(gate.PromotionRefused,
                     match="r = 4 projections has no finite eps"):
    promotion.plan_promotion(search_outcome.load_search_directory(directory),
                             target=8)


def test_poisson_plans_say_the_batch_is_not_capped(searches, tmp_path,
                                                   capsys):
  directory = searches.write(tmp_path)
  assert cli.main(["promote", str(directory), "--plan"]) == 0
  assert "not capped (Poisson): 603 = B + 4 sqrt(B)" in capsys.readouterr().out


def test_calibration_seeds_are_planned_priced_and_need_calibrate(
    searches, tmp_path, capsys):
  directory = searches.write(tmp_path)
  assert cli.main(["promote", str(directory), "--plan", "--calibrate",
                   "--calibration-seeds", "3"]) == 0
  out = capsys.readouterr().out
  assert ("calibration first: the winner at simulation batch sizes [8, 16,"
          " 32], 3 seeds each (same S, not private): 0.328x the reference"
          " run's examples") in out
  with pytest.raises(SystemExit) as exit_:
    cli.main(["promote", str(directory), "--plan", "--calibration-seeds", "2"])
  assert exit_.value.code == 2
  err = capsys.readouterr().err
  assert "--calibration-seeds: 2 needs --calibrate" in err
  with pytest.raises(ConfigError) as error:
    promotion.plan_promotion(search_outcome.load_search_directory(directory),
                             calibrate=True, calibration_seeds=0)
  assert error.value.field == "--calibration-seeds"
