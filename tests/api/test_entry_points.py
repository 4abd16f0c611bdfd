"""Tests of the Python API: the same search and plan as the command for the
digits demo, and a search of a team's own callables killed and resumed (the
privacy calculator: `test_calculator.py`)."""

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

from mlflow import MlflowClient
import pytest

from tan_tune import api
from tan_tune import mlflow_store
from tan_tune.cli import main as cli
from tan_tune.errors import ConfigError
from tan_tune.ledger import ledger as ledger_lib
from tan_tune.promote import run as run_lib
from tan_tune.search import search_files

import mlflow_stores
import search_checks

pytestmark = [pytest.mark.e2e]

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEMO = ROOT / "search_spaces" / "digits-demo.yaml"
TESTS = ROOT / "tests"
# Public in the plan, but of the run and the moment: ids, paths, timings.
_OF_THE_MOMENT = ("search_run_id", "trial_id", "trial_run_id",
                  "time_estimate", "calibration_seconds", "ledger")


def _cli(capsys, *argv):
  """The command, run here (on the session's Ray): what it prints."""
  capsys.readouterr()
  assert cli.main(list(map(str, argv))) == 0
  return capsys.readouterr().out


def _ranked(leaderboard, metric):
  return [(row["params"], row[metric], row["status"]) for row in leaderboard]


def test_the_api_searches_and_plans_as_the_command_does(tmp_path, local_ray,
                                                        capsys):
  by_cli, by_api = tmp_path / "cli", tmp_path / "api"
  # Two trials on one worker each: a worker costs ~5 s of imports.
  _cli(capsys, "search", DEMO, "--num-samples", 2, "--max-concurrent", 1,
       "--storage", by_cli,
       "--tracking-uri", mlflow_stores.store(tmp_path, "cli.db"))
  found = api.search(DEMO, num_samples=2, max_concurrent=1, storage=by_api,
                     tracking_uri=mlflow_stores.store(tmp_path, "api.db"))
  assert isinstance(found, api.SearchResult)
  assert found.directory == (by_api / "digits-demo").resolve()
  leaderboard = json.loads(
      (by_cli / "digits-demo" / search_files.LEADERBOARD_FILE).read_text())
  # The same seeds: the same trials, scores and ranks.
  assert _ranked(found.leaderboard, found.metric) == _ranked(
      leaderboard, found.metric)
  assert found.best["params"] == leaderboard[0]["params"]

  planned = json.loads(_cli(capsys, "promote", by_cli / "digits-demo",
                            "--plan", "--json", "--new-ledger"))
  shown = []
  promotion = api.promote(found.directory, plan_only=True, new_ledger=True,
                          on_plan=shown.append)
  assert promotion.result is None and shown == [promotion.plan]
  assert isinstance(promotion.plan, api.PromotionPlan)
  plan = json.loads(json.dumps(promotion.plan.as_dict(), default=str))
  for key in _OF_THE_MOMENT:
    plan.pop(key), planned.pop(key)
  assert plan == planned
  assert plan["privacy"]["epsilon"]["rdp"]["epsilon"] == pytest.approx(
      2.0, abs=1e-3)


_SEARCH_SCRIPT = """
import sys
import plugin_factories
from tan_tune import api

space = {
    "name": "own", "num_trials": 3, "max_concurrent": 1, "seed": 0,
    "dataset": {"factory": plugin_factories.tabular_tensors},
    "model": {"factory": plugin_factories.tabular_mlp,
              "kwargs": {"features": 6}},
    "reference": {"batch_size": 120, "noise_multiplier": 3.0, "steps": 20,
                  "delta": 1e-3},
    "simulation_batch_sizes": [30],
    "hyperparameters": {"lr": {"kind": "loguniform", "low": 0.1, "high": 2}},
    "metric": "accuracy", "mode": "max", "eval_every": int(sys.argv[4]),
    "device": "cpu", "resources": {"cpu": 1, "gpu": 0},
    "validation_fraction": 0.25,
}
if __name__ == "__main__":
  found = api.search(space, storage=sys.argv[1], tracking_uri=sys.argv[2],
                     resume=sys.argv[3] == "resume")
  print("best", found.best["trial_id"])
"""


def test_a_killed_search_of_own_callables_resumes_with_every_trial_once(
    tmp_path):
  """The driver, a script of the API, is killed with its local Ray once a
  trial is done, and a second run resumes it (a process too: the workers
  import the team's module from PYTHONPATH)."""
  script = tmp_path / "search_own.py"
  script.write_text(_SEARCH_SCRIPT)
  storage, uri = tmp_path / "runs", mlflow_stores.store(tmp_path)
  env = dict(os.environ, PYTHONPATH=str(TESTS), TUNE_GLOBAL_CHECKPOINT_S="1",
             PYTHONUNBUFFERED="1", RAY_AUTH_MODE="disabled")
  command = [sys.executable, str(script), str(storage), uri]
  out = tmp_path / "first.log"
  with out.open("w") as log:
    driver = subprocess.Popen([*command, "new", "10"], env=env, stdout=log,
                              stderr=subprocess.STDOUT, cwd=tmp_path,
                              start_new_session=True)
    # The live view prints a line per trial done off a terminal.
    deadline = time.time() + 300
    while time.time() < deadline and driver.poll() is None:
      if re.search(r"[1-9]/3 trials done", out.read_text()):
        break
      time.sleep(0.2)
    assert driver.poll() is None, out.read_text()[-3000:]
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
  directory = storage / "own"
  assert not (directory / search_files.BEST_FILE).exists()
  # The callables were saved as the references the workers imported.
  saved = (directory / search_files.SPACE_FILE).read_text()
  assert "plugin_factories:tabular_mlp" in saved
  assert "plugin_factories:tabular_tensors" in saved

  # An edit between kill and resume changes nothing: the resumed trials
  # evaluate at steps 10 and 20 as the search started, not every 5 steps.
  resumed = subprocess.run([*command, "resume", "5"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=600,
                           check=False)
  assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
  assert "best " in resumed.stdout
  assert "resumes with the copy saved then" in resumed.stdout
  state = json.loads((directory / search_files.STATE_FILE).read_text())
  # Every trial once, each trained on the factories' records.
  children = search_checks.check_mlflow(
      uri, "own", state["parent_run_id"], 3, batch_size=30,
      reference_batch_size=120)
  assert {run.data.params["trial.dataset.factory"] for run in children} == {
      "plugin_factories:tabular_tensors"}
  best = json.loads((directory / search_files.BEST_FILE).read_text())
  assert best["mlflow_parent_run_id"] == state["parent_run_id"]


def test_a_private_flow_refuses_a_ray_other_users_can_reach(
    searches, tmp_path, monkeypatch, local_ray):
  """Issue 38: on a notebook's `ray.init()`, whose session folder in
  /tmp/ray other users read, the API ran a private promotion. The session's
  Ray lies in an owner-only parent (conftest.py): opened, it is refused
  before anything is charged or trained."""
  del local_ray
  import ray  # pylint: disable=g-import-not-at-top
  directory = searches.write(tmp_path)
  uri = mlflow_stores.store(tmp_path)
  client = MlflowClient(uri)
  parent = client.create_run(mlflow_store.experiment_id(client, uri, "digits"))
  state = json.loads((directory / search_files.STATE_FILE).read_text())
  state["parent_run_id"] = parent.info.run_id
  (directory / search_files.STATE_FILE).write_text(json.dumps(state))
  entered = []
  monkeypatch.setattr(run_lib, "_run", lambda *args: entered.append(args))
  session = pathlib.Path(
      ray._private.worker._global_node.get_session_dir_path())  # pylint: disable=protected-access
  [hidden] = [f for f in session.parents if f.stat().st_mode & 0o077 == 0]
  hidden.chmod(0o755)
  try:
    with pytest.raises(ConfigError) as error:
      api.promote(directory, new_ledger=True)
  finally:
    hidden.chmod(0o700)
  assert str(session) in str(error.value)
  assert "readable by other users" in str(error.value)
  assert "ray.shutdown()" in str(error.value)
  assert not entered and ledger_lib.Ledger(uri).entries() == []


def test_calibration_seeds_need_calibration():
  with pytest.raises(ConfigError) as error:
    api.promote("runs/none", calibration_seeds=2)
  assert error.value.field == "calibration_seeds"
