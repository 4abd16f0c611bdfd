"""A private random search on digits, end to end: real Ray, Optuna, MLflow."""

import datetime
import json
import os
import pathlib
import signal
import stat
import subprocess
import sys
import time

from mlflow import MlflowClient
import mlflow.pyfunc
import numpy as np
import pytest
from ray.train import constants as ray_train_constants
import torch
import yaml

from tan_tune import api
from tan_tune import mlflow_store
from tan_tune.cli import main as cli
from tan_tune.cli import search as cli_search
from tan_tune.errors import ConfigError
from tan_tune.ledger import ledger as ledger_lib
from tan_tune.privacy import accounting
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.privacy import trial_count
from tan_tune.privacy import tuning
from tan_tune.promote import search_outcome
from tan_tune.registry import model_registry
from tan_tune.search import driver as search
from tan_tune.search import private_search
from tan_tune.search import search_files
from tan_tune.training import datasets
from tan_tune.training import private_score
import mlflow_stores
import other_users

# Whole private searches through Ray Tune: the end-to-end tier.
pytestmark = [pytest.mark.e2e]

DIGITS_N = 1437


def _space(tmp_path, name="private", **overrides):
  """Every trial a private run at (512, 3.918, 20) on digits; about 1.5
  trials (geometric), a budget of 4."""
  space = {
      "name": name,
      "dataset": {"name": "digits"},
      "model": {"name": "small-cnn"},
      "reference": {"batch_size": 512, "noise_multiplier": 3.918, "steps": 20,
                    "target_epsilon": 4},
      "simulation_batch_sizes": [512],
      "hyperparameters": {"lr": {"kind": "loguniform", "low": 0.5, "high": 4},
                          "momentum": {"kind": "choice", "values": [0, 0.5]}},
      "tuning_privacy": "private_random_search",
      "trial_count": {"distribution": "geometric", "mean": 1.5},
      "sampler": "random",
      "validation_fraction": 0.2,
      "score_noise": 2.0,
      "eval_every": 10,
      "max_concurrent": 1,
      "device": "cpu",
      **overrides,
  }
  path = tmp_path / f"{name}.yaml"
  path.write_text(yaml.safe_dump(space))
  return path


def test_a_private_random_search_releases_its_best_trial_alone(
    tmp_path, local_ray, monkeypatch):
  drawn, ran, drawn_at = [], [], []
  draw, release = private_search.draw_trial_count, private_search.release

  def spy_draw(space):
    drawn.append(draw(space))
    drawn_at.append(time.time() * 1000)  # No trial has started yet.
    return drawn[-1]

  def spy_release(space, results, *args):
    ran.append(len(list(results)))
    # Every trial was scored on private validation, once, by a DP count:
    # none measured the test split, which the release alone is.
    for result in results:
      assert result.metrics["evaluated_on"] == private_score.EVALUATED_ON
      assert not set(result.metrics) & {"accuracy", "ema_accuracy"}
      scores = result.metrics_dataframe["score"].isna().tolist()
      assert scores == [True] * (len(scores) - 1) + [False]
    return release(space, results, *args)

  def spy_test(config, weights):
    tested.append(config)
    return test_accuracies(config, weights)

  tested, test_accuracies = [], private_search.trial_lib.test_accuracies
  monkeypatch.setattr(private_search, "draw_trial_count", spy_draw)
  monkeypatch.setattr(private_search, "release", spy_release)
  monkeypatch.setattr(private_search.trial_lib, "test_accuracies", spy_test)
  uri = mlflow_stores.store(tmp_path)
  # Where Ray stages every experiment's trials, world-readable by default.
  ray_staging = pathlib.Path(ray_train_constants._get_ray_train_session_dir())  # pylint: disable=protected-access
  staged_before = set(ray_staging.glob("*/*"))
  result = search.run_search(_space(tmp_path), search.SearchOptions(
      storage=tmp_path / "runs", tracking_uri=uri, verbose=0,
      new_ledger=True, register="private-digits"))

  # Ray's copy of the trials' results (result.json, progress.csv, params,
  # the experiment state: K and every score) was owner-only, and is gone.
  assert stat.S_IMODE(ray_staging.stat().st_mode) == 0o700
  assert set(ray_staging.glob("*/*")) <= staged_before

  # K was drawn once, and exactly K private trials ran.
  assert len(drawn) == 1 and drawn[0] >= 1 and ran == drawn
  directory = result.directory
  assert stat.S_IMODE(directory.stat().st_mode) == 0o700
  state = json.loads((directory / search_files.STATE_FILE).read_text())
  assert "trial_count" not in state and state["released"] is True
  assert not (directory / "tune").exists()  # Secret generator states.
  assert not (directory / search_files.LEADERBOARD_FILE).exists()

  released = result.best
  reference = triplet_lib.PrivacyTriplet(DIGITS_N, 512, 3.918, 20)
  count = trial_count.TrialCount("geometric", 1.5)
  report = tuning.search_epsilon(reference, 1 / DIGITS_N, count, 2.0)
  expected, bound = report.epsilon, report.accountant
  assert released["epsilon"]["epsilon"] == pytest.approx(expected)
  assert released["epsilon"]["accountant"] == bound
  one_run = accounting.epsilon(reference).epsilon
  assert one_run < expected <= 4
  assert 0 < released["test_accuracy"]["ema_accuracy"] <= 1
  assert len(tested) == 1 and tested[0].score is None
  assert released["select_on"] == "validation"
  assert released["trial_config"]["privacy"]["reference_batch_size"] is None
  weights = torch.load(directory / private_search.MODEL_FILE,
                       weights_only=False)
  assert set(weights) == {"model", "ema", "config"}

  # MLflow holds the search's run alone: no trial, no count, no leaderboard.
  client = MlflowClient(uri)
  experiment = client.get_experiment_by_name("private")
  [run] = client.search_runs([experiment.experiment_id])
  assert run.info.run_id == result.parent_run_id
  assert run.data.tags[mlflow_store.TUNING_TAG] == "private_random_search"
  assert run.data.metrics["search_epsilon"] == pytest.approx(expected)
  assert "num_trials" not in run.data.params
  artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
  assert {"best.json", "model.pt", "search_space.yaml", "mlflow_model",
          "privacy_card.json", "privacy_card.md"} <= artifacts
  assert "leaderboard.json" not in artifacts and "plots" not in artifacts
  # The released weights as an MLflow Model: the EMA's, raw digits in.
  served = mlflow.pyfunc.load_model(client.download_artifacts(
      run.info.run_id, "mlflow_model", str(tmp_path)))
  probabilities = served.predict(np.zeros((3, 1, 8, 8), np.float32))
  np.testing.assert_allclose(probabilities.sum(1), 1, rtol=1e-5)

  # The attack on K through time: the search lasts about K trials, but
  # nothing in MLflow is timed after K was drawn, before the first trial.
  # (Tags and artifacts carry no time in MLflow.)
  ledger_run, = client.search_runs(
      [client.get_experiment_by_name(ledger_lib.LEDGER_EXPERIMENT)
       .experiment_id])
  times = [run.info.end_time, ledger_run.info.end_time]
  for key in run.data.metrics:
    times += [m.timestamp for m in client.get_metric_history(run.info.run_id,
                                                             key)]
  assert {"released_ema_accuracy", "released_validation_score"} <= set(
      run.data.metrics)
  assert run.info.end_time == run.info.start_time
  assert max(times) <= drawn_at[0]

  # The ledger holds the whole search as one entry.
  [entry] = ledger_lib.Ledger(uri).entries()
  assert entry.trial_count == count
  assert entry.promoted_run_id == result.parent_run_id
  assert entry.epsilon == pytest.approx(expected)
  text = cli_search.render_release(result)
  assert "for the whole search" in text and "not shown" in text
  assert "registered: private-digits version 1, alias candidate" in text

  # The release leaves with its guarantee: a version made before K was
  # drawn (MLflow dates it), its card read from the search run.
  version = client.get_model_version("private-digits", "1")
  assert (version.aliases, version.run_id) == (["candidate"],
                                                result.parent_run_id)
  assert version.creation_timestamp <= drawn_at[0]
  assert version.tags["tan_tune.status"] == "finished"
  assert float(version.tags["privacy.epsilon"]) == pytest.approx(expected,
                                                                 rel=1e-5)
  assert version.tags["privacy.accountant"] == bound
  assert version.description.startswith("# Privacy card: (")
  card = json.loads(pathlib.Path(client.download_artifacts(
      run.info.run_id, "privacy_card.json", str(tmp_path))).read_text())
  assert card["epsilon"] == {bound: pytest.approx(expected)}
  assert card["tuning"]["mode"] == "private_random_search"
  assert "geometric of mean 1.5" in card["tuning"]["guarantee"]
  assert "ranked by a DP score" in card["tuning"]["guarantee"]
  assert card["triplet"] == {"N": DIGITS_N, "B": 512, "sigma": 3.918, "S": 20,
                             "C": 1.0, "q": pytest.approx(512 / DIGITS_N),
                             "eta": pytest.approx(reference.eta)}
  assert card["sampling"]["matches"] and card["delta"] == pytest.approx(
      1 / DIGITS_N)
  assert card["ledger"]["composed_epsilon"] == pytest.approx(expected)
  assert card["released"]["weights"].startswith("the final weights only (ema")
  [row] = model_registry.versions(client, "private-digits")
  assert (row.metric, row.accuracy) == (
      "ema_accuracy", released["test_accuracy"]["ema_accuracy"])
  # The version's eps as its tag holds it, to 6 significant digits.
  model_registry.move_champion(client, "private-digits", "1",
                               max_epsilon=float(f"{expected:.6g}"))

  # Released once: neither promoted (another private run) nor resumed.
  with pytest.raises(ConfigError, match="released its best trial itself"):
    search_outcome.load_search_directory(directory)
  with pytest.raises(ConfigError, match="released its best trial itself"):
    search_outcome.load_search_run(result.parent_run_id, uri, tmp_path)
  with pytest.raises(FileExistsError, match="released its result"):
    search.run_search(_space(tmp_path), search.SearchOptions(
        storage=tmp_path / "runs", tracking_uri=uri, resume=True, verbose=0))


def test_a_search_the_ledger_has_no_room_for_writes_nothing(tmp_path):
  uri = mlflow_stores.store(tmp_path)
  ledger = ledger_lib.Ledger(uri)
  data = datasets.load_dataset(datasets.DatasetConfig("digits"))
  earlier = triplet_lib.PrivacyTriplet(DIGITS_N, 512, 2.5, 40)  # eps 3.56.
  ledger.reserve(ledger_lib.Entry(
      dataset_identity=datasets.examples(data), dataset_name="digits",
      promotion="earlier/run", triplet=earlier, delta=1 / DIGITS_N,
      epsilon=accounting.epsilon(earlier).epsilon, budget=4.0))
  # The search alone spends 1.99: both are over the budget of 4.
  with pytest.raises(ConfigError, match="has already spent eps = 3.55"):
    search.run_search(_space(tmp_path), search.SearchOptions(
        storage=tmp_path / "runs", tracking_uri=uri, verbose=0))
  assert not (tmp_path / "runs").exists()
  assert len(ledger.entries()) == 1
  assert MlflowClient(uri).get_experiment_by_name("private") is None


def test_a_store_without_the_datasets_ledger_needs_new_ledger(tmp_path):
  """A fresh --tracking-uri would start an empty ledger beside the team's."""
  uri = mlflow_stores.store(tmp_path)
  with pytest.raises(ConfigError, match="--new-ledger: 'unset' .* has no ledger entry for digits"):
    search.run_search(_space(tmp_path), search.SearchOptions(
        storage=tmp_path / "runs", tracking_uri=uri, verbose=0))
  assert not (tmp_path / "runs").exists()
  assert ledger_lib.Ledger(uri).entries() == []


def test_the_number_of_trials_cannot_be_set_on_the_command_line(tmp_path):
  with pytest.raises(ConfigError, match="--num-samples: 3 .*drawn secretly"):
    search.run_search(_space(tmp_path), search.SearchOptions(
        storage=tmp_path / "runs", num_samples=3, verbose=0))


def _owner_only(folder: pathlib.Path) -> list[str]:
  """Everything under `folder` another user could read."""
  return [f"{p}: {stat.S_IMODE(p.stat().st_mode):o}"
          for p in [folder, *folder.rglob("*")]
          if stat.S_IMODE(p.stat().st_mode) & 0o077]


def _interrupt(command, directory, stop, env):
  """Runs `command` until a trial checkpoint not there before appears, then
  sends `stop`: the search is stopped mid-trial. Returns its stderr."""
  before = set(directory.glob("tune/*/checkpoint_*"))
  driver = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
  deadline = time.monotonic() + 300
  while not set(directory.glob("tune/*/checkpoint_*")) - before:
    assert driver.poll() is None and time.monotonic() < deadline
    time.sleep(0.2)
  driver.send_signal(stop)
  _, err = driver.communicate(timeout=300)
  assert driver.returncode == 130, err[-3000:]
  return err


def test_an_interrupted_private_search_releases_nothing_and_resumes(
    tmp_path, local_ray, capsys):
  """SIGTERM during the first trial, then Ctrl-C during the resumed one:
  the operator, not the secret draw, would choose K if the best so far were
  released. Both stops are real processes; the last resume runs here."""
  del local_ray
  # A checkpoint every 5 of 40 steps: each stop comes some 30 steps before
  # the trial would end (and release).
  path = _space(tmp_path, trial_count={"distribution": "logarithmic",
                                       "mean": 2},  # K >= 1.
                reference={"batch_size": 512, "noise_multiplier": 3.918,
                           "steps": 40, "target_epsilon": 4},
                eval_every=5)
  argv = ["search", str(path), "--storage", str(tmp_path / "runs"),
          "--tracking-uri", mlflow_stores.store(tmp_path)]
  command = [sys.executable, "-m", "tan_tune.cli", *argv]
  env = dict(os.environ, RAY_AUTH_MODE="disabled")
  directory = tmp_path / "runs" / "private"
  for stop, flag in ((signal.SIGTERM, "--new-ledger"),
                     (signal.SIGINT, "--resume")):
    err = _interrupt([*command, flag], directory, stop, env)
    assert "nothing was released" in err and "--resume" in err
    state = json.loads((directory / search_files.STATE_FILE).read_text())
    assert "released" not in state and state["trial_count"] >= 1
    assert not (directory / search_files.BEST_FILE).exists()
    assert not (directory / private_search.MODEL_FILE).exists()
    assert (directory / "tune").is_dir()  # What --resume needs.
    assert _owner_only(directory) == []

  capsys.readouterr()
  assert cli.main([*argv, "--resume"]) == 0
  assert "for the whole search" in capsys.readouterr().out
  assert json.loads((directory / search_files.STATE_FILE).read_text())["released"]
  assert not (directory / "search.log").exists()  # It counted the trials.


# A release time the searches below end by: 8 trials of 2 steps take about
# 20 s on 2 busy cores.
_RELEASE_SECONDS = 60
# What a run past its release time says (`release_time.LATE`).
_LATE = "was not done by its release time"


def test_a_search_released_at_a_fixed_time_shows_others_that_time_alone(
    tmp_path, local_ray, monkeypatch, opened, capsys):
  """K = 1 and K = 8 with the same release time, each with its store in a
  0755 folder, where another user may `stat` mlflow.db, its ledger key's
  folder, the artifacts' and the search's folders: every ctime they read
  is the release time, whatever K, and the run ends at its start."""
  del local_ray
  path = _space(tmp_path, reference={
      "batch_size": 512, "noise_multiplier": 3.918, "steps": 2,
      "target_epsilon": 4}, eval_every=2)
  ran, seen = [], {}
  release = private_search.release

  def spy_release(space, results, *args):
    ran.append(len(list(results)))
    return release(space, results, *args)

  monkeypatch.setattr(private_search, "release", spy_release)
  for count in (1, 8):
    monkeypatch.setattr(private_search, "draw_trial_count",
                        lambda space, k=count: k)
    work = opened / f"k{count}"
    work.mkdir(mode=0o755)
    uri = mlflow_stores.store(work)
    result = api.search(
        path, storage=work / "runs", tracking_uri=uri, new_ledger=True,
        announce_log=False,
        release_at=datetime.timedelta(seconds=_RELEASE_SECONDS))
    run = MlflowClient(uri).get_run(result.parent_run_id)
    start = run.info.start_time / 1000
    ctimes = other_users.ctimes_seen_by_others(work)
    seen[count] = ({name: round(ctime - start)
                    for name, ctime in ctimes.items()},
                   run.info.end_time - run.info.start_time)
  assert ran == [1, 8]
  assert _LATE not in "".join(capsys.readouterr()), (
      "a search ended after its release time: raise _RELEASE_SECONDS")
  assert seen[1] == seen[8]
  ctimes, duration = seen[1]
  assert {".", "mlflow.db", "mlflow.db.ledger-key", "mlartifacts",
          "runs"} <= set(ctimes)
  assert set(ctimes.values()) == {_RELEASE_SECONDS} and duration == 0
