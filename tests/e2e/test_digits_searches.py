"""End-to-end searches on digits with a real local Ray, Optuna and MLflow."""

import json
import os
import pathlib
import signal
import socket
import stat
import subprocess
import sys
import time

from mlflow import MlflowClient
import pytest
import yaml

from tan_tune import mlflow_store
from tan_tune.search import callbacks
from tan_tune.search import driver as search
from tan_tune.search import resolved as resolved_lib
from tan_tune.search import search_files
from tan_tune.search import trial_record

import search_checks

# Whole searches through Ray Tune: the end-to-end tier.
pytestmark = [pytest.mark.e2e]

DEMO = pathlib.Path(__file__).resolve().parents[2] / "search_spaces" / "digits-demo.yaml"


def _small_space(tmp_path, name, **overrides):
  """The digits demo cut to 20 steps, so a trial takes about a second, and
  to two trials, enough to rank, on one worker: each costs ~5 s of imports."""
  space = yaml.safe_load(DEMO.read_text())
  space.update(name=name, eval_every=10, num_trials=2, max_concurrent=1)
  space["reference"]["steps"] = 20
  space["reference"]["noise_multiplier"] = 6.0  # eps < 8 at 20 steps.
  space.update(overrides)
  path = tmp_path / f"{name}.yaml"
  path.write_text(yaml.safe_dump(space))
  return path


def test_a_simulated_search_writes_owner_only_files(tmp_path, local_ray,
                                                   monkeypatch):
  """Issue 38: a simulated search's leaderboard, losses and checkpoints
  were 0644, readable by every local user (the trials themselves are left
  out here: what the search writes inside its boundary is)."""
  del local_ray

  def write(resolved, mode, space_path, options, directory, *rest):
    del resolved, space_path, options, rest
    assert not mode.secret
    (directory / "trial" / "checkpoint").mkdir(parents=True)
    (directory / "trial" / "checkpoint" / "checkpoint.pt").write_bytes(b"w")
    (directory / search_files.LEADERBOARD_FILE).write_text("[]")

  monkeypatch.setattr(search, "_run", write)
  search.run_search(_small_space(tmp_path, "modes"), search.SearchOptions(
      storage=tmp_path / "runs", tracking_uri=f"sqlite:///{tmp_path}/m.db"))
  directory = tmp_path / "runs" / "modes"
  paths = [directory, *directory.rglob("*")]
  assert len(paths) == 5
  for path in paths:
    assert stat.S_IMODE(path.stat().st_mode) == (
        0o700 if path.is_dir() else 0o600), path


def test_a_digits_search_varies_steps_network_and_width_within_a_budget(
    tmp_path, local_ray):
  # S_ref = 20 at B_ref = 512 (10,240 example passes); S = 5 has B' = 1024
  # (5,120); S = 80 (B' = 256, 20,480) is over budget. The network is
  # small-cnn at a width, or the ScatterNet, which has none: the seed's first
  # four trials draw both, and both step counts.
  space = _small_space(
      tmp_path, "frontier", steps_grid=[5, 20, 80], num_trials=4,
      compute_budget={"examples": 15_000},
      hyperparameters={"lr": {"kind": "loguniform", "low": 0.5, "high": 4},
                       "ema_decay": {"kind": "choice", "values": [0.9]},
                       "width": {"kind": "choice", "values": [0.5, 1.0]},
                       "model": {"kind": "choice",
                                 "values": ["small-cnn", "scatternet"]}})
  result = search.run_search(
      space, search.SearchOptions(storage=tmp_path / "runs", verbose=0,
                                  tracking_uri=f"sqlite:///{tmp_path}/m.db"))
  rows = result.leaderboard
  assert [row["status"] for row in rows] == ["finished"] * 4
  assert {row["params"]["model"] for row in rows} == {"small-cnn",
                                                      "scatternet"}
  cost = {5: 1024 * 5, 20: 512 * 20}
  for row in rows:
    assert row["params"].get("width") in (
        (0.5, 1.0) if row["params"]["model"] == "small-cnn" else (None,))
    assert row["reference_examples"] == cost[row["params"]["steps"]]
    assert row["reference_seconds"] == pytest.approx(
        cost[row["params"]["steps"]] / row["examples_per_second"])
  assert rows[0]["front"]  # The best scorer is never dominated.
  front = [(row["reference_examples"], row["ema_accuracy"]) for row in rows
           if row["front"]]
  assert all(not (c2 <= c1 and s2 > s1) for c1, s1 in front
             for c2, s2 in front)
  assert (result.directory / "plots" / "compute_front.png").exists()
  best = json.loads((result.directory / search_files.BEST_FILE).read_text())
  model = best["trial_config"]["model"]
  assert (model["name"], model["width"]) == (
      rows[0]["params"]["model"], rows[0]["params"].get("width", 1.0))


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.fixture
def mlflow_server(tmp_path):
  port = _free_port()
  server = subprocess.Popen(
      [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1",
       "--port", str(port), "--backend-store-uri",
       f"sqlite:///{tmp_path}/server.db", "--artifacts-destination",
       str(tmp_path / "artifacts"), "--workers", "1"],
      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
      start_new_session=True,
      # No job runner: its 8 processes, each importing MLflow, serve no test.
      env=dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false"),
  )
  uri = f"http://127.0.0.1:{port}"
  deadline = time.time() + 90
  while time.time() < deadline:
    try:
      with socket.create_connection(("127.0.0.1", port), timeout=1):
        break
    except OSError:
      time.sleep(0.5)
  else:
    os.killpg(server.pid, signal.SIGKILL)
    pytest.fail("mlflow server did not start in 90 s")
  yield uri
  # Killed: its graceful shutdown took ~20 s, and its store is thrown away.
  os.killpg(server.pid, signal.SIGKILL)
  server.wait(timeout=30)


def test_a_search_logs_a_parent_and_a_nested_run_per_trial_to_a_server(
    tmp_path, local_ray, mlflow_server, monkeypatch):
  """A real `mlflow server`; a search without a tracking URI writes to
  ./mlflow.db (the failing search below)."""
  resolutions = []
  resolve = resolved_lib.resolve
  monkeypatch.setattr(resolved_lib, "resolve",
                      lambda *args: resolutions.append(args) or resolve(*args))
  reads = []
  build = trial_record.build
  monkeypatch.setattr(
      trial_record, "build",
      lambda *args, **kwargs: reads.append(args) or build(*args, **kwargs))
  result = search.run_search(
      _small_space(tmp_path, "server"),
      search.SearchOptions(storage=tmp_path / "runs",
                           tracking_uri=mlflow_server, verbose=0),
  )
  # Resolved once; the trials, callbacks and results read what it gave: in
  # this process each trial's record is built twice (for its MLflow params,
  # and for its leaderboard row, whose record the winner's best.json
  # reuses); each Ray worker builds it once for its own trial.
  assert len(resolutions) == 1
  assert len(reads) == 2 + 2
  assert [row["status"] for row in result.leaderboard] == ["finished"] * 2
  values = [row["ema_accuracy"] for row in result.leaderboard]
  assert values == sorted(values, reverse=True)
  best = json.loads((result.directory / search_files.BEST_FILE).read_text())
  assert best["trial_id"] == result.leaderboard[0]["trial_id"]
  assert best["trial_config"]["privacy"]["batch_size"] == 64
  assert best["trial_config"]["privacy"]["reference_batch_size"] == 512
  assert best["mlflow_parent_run_id"] == result.parent_run_id
  children = search_checks.check_mlflow(mlflow_server, "server",
                                        result.parent_run_id, 2)
  assert best["mlflow_run_id"] in {c.info.run_id for c in children}
  artifacts = MlflowClient(mlflow_server).list_artifacts(result.parent_run_id)
  names = {a.path for a in artifacts}
  assert {"search_space.yaml", "best.json", "leaderboard.json"} <= names


def test_resume_without_a_search_is_a_clear_error(tmp_path):
  with pytest.raises(FileNotFoundError, match="no search to resume"):
    search.run_search(_small_space(tmp_path, "none"),
                      search.SearchOptions(storage=tmp_path, resume=True))


def test_early_stopped_trials_are_told_to_optuna_as_pruned(tmp_path):
  import optuna  # pylint: disable=g-import-not-at-top

  from tan_tune.search import space as search_space  # pylint: disable=g-import-not-at-top

  space = search_space.load_search_space(_small_space(tmp_path, "asha"))
  storage = optuna.storages.InMemoryStorage()
  searcher = callbacks.PrunedAwareOptunaSearch(
      space=callbacks.DefineByRun(space), metric="ema_accuracy",
      mode="max", storage=storage, study_name="asha",
  )
  for trial_id in ("stopped", "finished"):
    assert searcher.suggest(trial_id)
  searcher.on_trial_complete("stopped", result={
      "step": 10, "steps_total": 20, "ema_accuracy": 0.5})
  searcher.on_trial_complete("finished", result={
      "step": 20, "steps_total": 20, "ema_accuracy": 0.9})
  states = [t.state for t in optuna.load_study(
      study_name="asha", storage=storage).trials]
  assert states == [optuna.trial.TrialState.PRUNED,
                    optuna.trial.TrialState.COMPLETE]


def test_the_study_copy_holds_each_trial_once_across_a_resume(tmp_path):
  # The driver is killed after trial "a" finished but before Tune saved its
  # state: the resumed search re-runs "a" from the older snapshot.
  import optuna  # pylint: disable=g-import-not-at-top

  from tan_tune.search import space as search_space  # pylint: disable=g-import-not-at-top

  space = search_space.load_search_space(_small_space(tmp_path, "copy"))
  copy_url = f"sqlite:///{tmp_path}/optuna.db"

  def searcher():
    return callbacks.PrunedAwareOptunaSearch(
        space=callbacks.DefineByRun(space), metric="ema_accuracy",
        mode="max", study_name="copy", study_copy=copy_url)

  first = searcher()
  for trial_id in ("a", "b"):
    assert first.suggest(trial_id)
  first.save(str(tmp_path / "snapshot.pkl"))
  done = {"step": 20, "steps_total": 20, "ema_accuracy": 0.9}
  first.on_trial_complete("a", result=done)

  resumed = searcher()
  resumed.restore(str(tmp_path / "snapshot.pkl"))
  resumed.on_trial_result("a", dict(done, step=10, training_iteration=1))
  resumed.on_trial_complete("a", result=done)
  resumed.on_trial_complete("b", error=True)
  copied = optuna.load_study(study_name="copy", storage=copy_url).trials
  assert [(t.user_attrs[callbacks.RAY_TRIAL_ID], t.state) for t in copied] == [
      ("a", optuna.trial.TrialState.COMPLETE),
      ("b", optuna.trial.TrialState.FAIL)]
  assert copied[0].value == 0.9 and copied[0].params


def test_a_resumed_trial_the_searcher_never_suggested_is_not_told(tmp_path):
  # Killed after Tune saved trial "b" but before the searcher's snapshot
  # held it: the resumed searcher hears of a trial it does not know.
  from tan_tune.search import space as search_space  # pylint: disable=g-import-not-at-top

  space = search_space.load_search_space(_small_space(tmp_path, "unknown"))
  searcher = callbacks.PrunedAwareOptunaSearch(
      space=callbacks.DefineByRun(space), metric="ema_accuracy", mode="max",
      study_name="unknown")
  assert searcher.suggest("a")
  done = {"step": 20, "steps_total": 20, "ema_accuracy": 0.9,
          "training_iteration": 2}
  searcher.on_trial_result("b", dict(done, step=10, training_iteration=1))
  searcher.on_trial_complete("b", result=done)
  searcher.on_trial_complete("b", error=True)
  searcher.on_trial_complete("a", result=done)
  [told] = searcher._ot_study.get_trials()  # pylint: disable=protected-access
  assert told.value == 0.9


def test_a_search_whose_trials_all_fail_exits_non_zero(tmp_path, local_ray,
                                                       capsys, monkeypatch):
  from tan_tune.cli import main as cli  # pylint: disable=g-import-not-at-top

  monkeypatch.chdir(tmp_path)
  # One trial: Tune starts a fresh worker for each of its three tries.
  space = _small_space(tmp_path, "diverge", num_trials=1, hyperparameters={
      "lr": {"kind": "choice", "values": [1.0e+30]}})
  with pytest.raises(SystemExit) as exit_info:
    cli.main(["search", str(space), "--storage", str(tmp_path / "runs")])
  assert exit_info.value.code == 1
  assert "every trial failed" in capsys.readouterr().err
  # Without --tracking-uri, the search is recorded in ./mlflow.db.
  assert (tmp_path / "mlflow.db").exists()
  client = MlflowClient(mlflow_store.DEFAULT_TRACKING_URI)
  [parent] = client.search_runs(
      [client.get_experiment_by_name("diverge").experiment_id],
      f"tags.`{mlflow_store.KIND_TAG}` = 'search'")
  assert parent.info.status == "FAILED"


def test_public_data_trials_train_on_it_and_promote_plans_the_private_data(
    tmp_path, local_ray):
  from tan_tune.errors import ConfigError  # pylint: disable=g-import-not-at-top
  from tan_tune.promote import plan as promotion  # pylint: disable=g-import-not-at-top
  from tan_tune.promote import search_outcome  # pylint: disable=g-import-not-at-top

  # Synthetic images shaped as digits (1 x 8 x 8, 10 classes) stand for a
  # public proxy of the private digits.
  public = {"name": "synthetic", "image_size": 8, "channels": 1,
            "train_size": 600, "test_size": 120}
  space = _small_space(tmp_path, "public", tuning_privacy="public_data",
                       public_dataset=public)
  uri = f"sqlite:///{tmp_path}/mlflow.db"
  result = search.run_search(space, search.SearchOptions(
      storage=tmp_path / "runs", tracking_uri=uri, verbose=0))
  client = MlflowClient(uri)
  runs = client.search_runs(
      [client.get_experiment_by_name("public").experiment_id])
  assert len(runs) == 3
  assert {r.data.tags[mlflow_store.TUNING_TAG] for r in runs} == {"public_data"}
  assert {r.data.params.get("trial.dataset.name") for r in runs
          if r.info.run_id != result.parent_run_id} == {"synthetic"}
  plan = promotion.plan_promotion(
      search_outcome.load_search_directory(result.directory))
  assert plan.config.dataset.name == "digits"
  assert plan.as_dict()["tuning_privacy"] == "public_data"
  assert "end-to-end" in plan.as_dict()["tuning_guarantee"]

  # Digits re-split with another seed is the same data: refused, by content.
  same = _small_space(tmp_path, "same", tuning_privacy="public_data",
                      public_dataset={"name": "digits", "seed": 1})
  with pytest.raises(ConfigError, match="public_dataset: 'digits'.*same data"):
    search.run_search(same, search.SearchOptions(
        storage=tmp_path / "runs", tracking_uri=uri, verbose=0))
