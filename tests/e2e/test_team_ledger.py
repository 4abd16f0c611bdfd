"""One ledger for a team on the real server: PostgreSQL, `mlflow server
--app-name basic-auth`, people and jobs charging the same data at once
(`ledger_racers.py`), each with a HOME, a login and a key of their own or
the team's."""

import dataclasses
import os
import pathlib
import subprocess
import sys
import time

from mlflow import MlflowClient
from mlflow.entities import ViewType
import pytest
import requests
import yaml

from tan_tune import api
from tan_tune import mlflow_store
from tan_tune.cli import main as cli
from tan_tune.ledger import ledger as ledger_lib
from tan_tune.ledger import ledger_entry
from tan_tune.ledger import ledger_key
from tan_tune.privacy import accounting
from tan_tune.privacy import triplet as triplet_lib
import ledger_racers
import promote_processes
import promoted_runs

pytestmark = pytest.mark.team

DEMO = (pathlib.Path(__file__).resolve().parents[2] / "search_spaces"
        / "digits-demo.yaml")
FIRST_CHARGES = 20
CROWDS = 10


@pytest.fixture(scope="module")
def people(team_server):
  """Two people and a cluster job, each a login of the server."""
  return {name: team_server.create_user(name, f"{name}-password-123")
          for name in ("alice", "bob", "job")}


@pytest.fixture(scope="module")
def pool():
  with ledger_racers.racers(4) as racers:
    yield racers


@pytest.fixture
def fresh(team_server):
  """The server's store as on its first day."""
  team_server.empty_store()
  return team_server


def _env(credentials, home, key_file=None):
  return {**credentials.env(), "HOME": str(home),
          ledger_key.KEY_FILE_VARIABLE: key_file and str(key_file)}


def _as(monkeypatch, credentials, home, key_file=None):
  """This process as `credentials`, at `home`, with `key_file` or none."""
  for name, value in _env(credentials, home, key_file).items():
    if value is None:
      monkeypatch.delenv(name, raising=False)
    else:
      monkeypatch.setenv(name, value)


def _stored_entries(team_server):
  """Every entry's run as the admin reads the database: no ledger code."""
  client = MlflowClient(team_server.tracking_uri)
  experiments = [e.experiment_id for e in client.search_experiments(
      view_type=ViewType.ALL)]
  return client.search_runs(
      experiments, f"tags.`tan_tune.kind` = '{ledger_lib.ENTRY_KIND}'",
      run_view_type=ViewType.ALL)


def test_first_charges_at_once_never_start_two_ledgers(
    fresh, people, pool, tmp_path, monkeypatch):
  """The issue's race, twenty times on a fresh server: two people, each
  with a key of their own made at their first charge, charge the digits at
  once. Exactly one runs; the other is refused naming the fix; the store
  holds one ledger id."""
  for attempt in range(FIRST_CHARGES):
    fresh.empty_store()
    homes = {name: tmp_path / f"{attempt}-{name}" for name in ("alice", "bob")}
    outcome = pool.race(fresh.tracking_uri, "digits-id", 100.0, {
        name: _env(people[name], home) for name, home in homes.items()})
    assert sorted(o.split(":")[0] for o in outcome.values()) == [
        "ran", "refused"], outcome
    [refusal] = [o for o in outcome.values() if o != "ran"]
    assert "get the team's ledger key" in refusal, refusal
    [winner] = [name for name, o in outcome.items() if o == "ran"]
    _as(monkeypatch, people[winner], homes[winner])
    [digits] = api.ledger(fresh.tracking_uri).datasets
    assert [run.promotion for run in digits.runs] == [winner]
    _as(monkeypatch, fresh.admin, tmp_path)
    assert {run.data.tags[ledger_entry.LEDGER_ID_TAG]
            for run in _stored_entries(fresh)
            if ledger_lib.WITHDRAWN_TAG not in run.data.tags} == {
                digits.ledger_id}


def test_four_charges_at_once_for_a_budget_of_two_run_exactly_two(
    fresh, people, pool, tmp_path, monkeypatch):
  """Alice, Bob and two cluster jobs, all with the team's key, charge one
  dataset at once, ten times (a new dataset each time): exactly two run,
  two are refused with the composed figure, the ledger holds two entries."""
  key = tmp_path / "team.key"
  key.write_bytes(os.urandom(ledger_key.KEY_BYTES))
  key.chmod(0o640)
  budget = ledger_racers.budget_of(2)
  crowd = {"alice": _env(people["alice"], tmp_path / "alice", key),
           "bob": _env(people["bob"], tmp_path / "bob", key),
           "job-1": _env(people["job"], tmp_path / "job", key),
           "job-2": _env(people["job"], tmp_path / "job", key)}
  _as(monkeypatch, people["alice"], tmp_path / "alice", key)
  for attempt in range(CROWDS):
    dataset = f"dataset-{attempt}"
    outcome = pool.race(fresh.tracking_uri, dataset, budget,
                        {f"{name}/{attempt}": env for name, env in
                         crowd.items()})
    ran = sorted(name for name, o in outcome.items() if o == "ran")
    assert len(ran) == 2, outcome
    for name, refusal in outcome.items():
      if name not in ran:
        assert "has already spent eps" in refusal, refusal
    entries = ledger_lib.Ledger(fresh.tracking_uri).entries(dataset)
    assert sorted(e.promotion for e in entries) == ran


def _promote(monkeypatch, person, home, key, directory, trial, *options):
  """`tan-tune promote`'s exit status as `person`."""
  _as(monkeypatch, person, home, key)
  try:
    return cli.main(["promote", str(directory), "--trial", trial, *options])
  except SystemExit as exit_info:
    return exit_info.code


def test_two_peoples_promotions_compose_in_one_ledger(
    fresh, people, local_ray, tmp_path, monkeypatch, capsys):
  """Alice searches the digits on the server; she and Bob, each at a HOME
  of their own with the team's key, promote two of its trials. The server stops while
  Alice's reference run trains and starts again 15 s later: her promotion
  ends (or its rerun resumes it) with one finished run and one charge.
  One ledger composes both; a third promotion, past the budget, is
  refused; Carol, without the key, is refused with the fix and charges
  nothing. Alice's registered version is then served from the server."""
  key = tmp_path / "team.key"
  key.write_bytes(os.urandom(ledger_key.KEY_BYTES))
  key.chmod(0o640)
  # A budget two promotions fit in, three not: two runs of S steps compose
  # as one of 2S (one Poisson sampler, one sigma).
  run = triplet_lib.PrivacyTriplet(1437, 64, 2.0, 60)
  two, three = (accounting.epsilon(dataclasses.replace(run, steps=k * 60),
                                   1 / 1437).epsilon for k in (2, 3))
  _as(monkeypatch, people["alice"], tmp_path / "alice", key)
  space = {**yaml.safe_load(DEMO.read_text()), "name": "digits",
           "num_trials": 3, "eval_every": 30, "simulation_batch_sizes": [64],
           "reference": {"batch_size": 64, "noise_multiplier": 2.0,
                         "steps": 60, "target_epsilon": (two + three) / 2}}
  found = api.search(space, storage=tmp_path / "runs",
                     tracking_uri=fresh.tracking_uri)
  directory = found.directory
  a, b, c = (row["trial_id"] for row in found.leaderboard)
  _promote_through_a_restart(fresh, directory, tmp_path, [
      "--trial", a, "--new-ledger", "--register", "digits-team"])
  assert _promote(monkeypatch, people["bob"], tmp_path / "bob", key,
                  directory, b) == 0
  capsys.readouterr()
  assert _promote(monkeypatch, people["bob"], tmp_path / "bob", key,
                  directory, c) == 3
  assert "has already spent eps" in capsys.readouterr().err
  carol = fresh.create_user("carol", "carol-password-123")
  assert _promote(monkeypatch, carol, tmp_path / "carol", None, directory,
                  c) == 2
  [line] = capsys.readouterr().err.strip().splitlines()
  assert "TAN_TUNE_LEDGER_KEY_FILE" in line and "--import-key" in line
  _as(monkeypatch, people["alice"], tmp_path / "alice", key)
  [digits] = api.ledger(fresh.tracking_uri).datasets
  assert len(digits.runs) == 2 and digits.composed.epsilon <= digits.budget
  promoted = {trial: promoted_runs.promoted(fresh.tracking_uri, "digits",
                                            trial)[1]
              for trial in (a, b)}
  assert {run.promoted_run_id for run in digits.runs} == {
      run.info.run_id for run in promoted.values()}
  client = MlflowClient(fresh.tracking_uri)
  assert len(client.search_runs(
      [promoted[a].info.experiment_id],
      f"tags.`{mlflow_store.KIND_TAG}` = 'promoted'")) == 2  # Not one more.
  _serve(fresh.tracking_uri, "models:/digits-team@candidate", tmp_path)


def _promote_through_a_restart(server, directory, folder, options):
  """`tan-tune promote` in a process of its own, the server stopped for
  15 s once its reference run has a checkpoint: it finishes, or fails with
  one line and the same command finishes it."""
  command = [sys.executable, "-m", "tan_tune.cli", "promote", str(directory),
             "--verbose", *options]
  train = directory / "promote" / options[1] / "train"
  log = folder / "promote.log"
  with promote_processes.running(command, log) as driver:
    promote_processes.wait_while_alive(
        driver, log, lambda: any(train.rglob("checkpoint_*")))
    server.stop_mlflow()
    time.sleep(15)
    server.start_mlflow()
    status = driver.wait(timeout=600)
  printed = log.read_text()
  if status:
    assert printed.strip().splitlines()[-1].startswith(
        "tan-tune promote: error:"), printed[-3000:]
    again = subprocess.run(command, capture_output=True, text=True,
                           timeout=600, check=False)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]


def _serve(tracking_uri, model_uri, folder):
  """`mlflow models serve` of `model_uri` from the server, as the logged-in
  user: its answer to two digits."""
  port = promote_processes.free_port()
  # The environment's commands first: the server starts uvicorn by name.
  scripts = pathlib.Path(sys.executable).parent
  env = dict(os.environ, MLFLOW_TRACKING_URI=tracking_uri,
             PATH=f"{scripts}{os.pathsep}{os.environ['PATH']}")
  command = ["mlflow", "models", "serve", "-m", model_uri, "--env-manager",
             "local", "--host", "127.0.0.1", "--port", str(port)]
  url = f"http://127.0.0.1:{port}"
  with promote_processes.running(command, folder / "serve.log",
                                 env=env) as server:
    promote_processes.wait_while_alive(
        server, folder / "serve.log", lambda: _answers(f"{url}/ping"))
    answer = requests.post(f"{url}/invocations",
                           json={"inputs": [[[[0.0] * 8] * 8]] * 2},
                           timeout=60)  # Two 1x8x8 digits.
  answer.raise_for_status()
  predictions = answer.json()["predictions"]
  assert len(predictions) == 2 and len(predictions[0]) == 10


def _answers(url):
  try:
    return requests.get(url, timeout=2).ok
  except requests.ConnectionError:
    return False


def test_an_entry_edited_on_the_server_stops_the_next_charge_naming_it(
    fresh, people, pool, tmp_path, monkeypatch, capsys):
  """Bob may edit every run (the team's EDIT); he gives Alice's charge back
  by its tags. Her next charge and `tan-tune ledger` refuse, naming it."""
  key = tmp_path / "team.key"
  key.write_bytes(os.urandom(ledger_key.KEY_BYTES))
  key.chmod(0o640)
  alice = _env(people["alice"], tmp_path / "alice", key)
  assert pool.race(fresh.tracking_uri, "digits-id", 100.0,
                   {"alice/1": alice}) == {"alice/1": "ran"}
  _as(monkeypatch, people["bob"], tmp_path / "bob")
  client = MlflowClient(fresh.tracking_uri)
  [run] = _stored_entries(fresh)
  client.set_tag(run.info.run_id, ledger_lib.WITHDRAWN_TAG, "true")
  outcome = pool.race(fresh.tracking_uri, "digits-id", 100.0,
                      {"alice/2": alice})["alice/2"]
  assert "changed without the ledger key" in outcome
  assert run.info.run_id in outcome
  _as(monkeypatch, people["alice"], tmp_path / "alice", key)
  with pytest.raises(SystemExit) as refused:
    cli.main(["ledger", "--tracking-uri", fresh.tracking_uri])
  assert refused.value.code == 2
  assert run.info.run_id in capsys.readouterr().err


def test_renaming_the_ledger_experiment_changes_nothing_it_composes(
    fresh, people, pool, tmp_path, monkeypatch):
  key = tmp_path / "team.key"
  key.write_bytes(os.urandom(ledger_key.KEY_BYTES))
  key.chmod(0o640)
  alice = _env(people["alice"], tmp_path / "alice", key)
  pool.race(fresh.tracking_uri, "digits-id", 100.0, {"alice/1": alice})
  _as(monkeypatch, people["alice"], tmp_path / "alice", key)
  before = api.ledger(fresh.tracking_uri)
  client = MlflowClient(fresh.tracking_uri)
  experiment = client.get_experiment_by_name(ledger_lib.LEDGER_EXPERIMENT)
  client.rename_experiment(experiment.experiment_id, "old-stuff")
  assert api.ledger(fresh.tracking_uri) == before
  pool.race(fresh.tracking_uri, "digits-id", 100.0, {"alice/2": alice})
  [digits] = api.ledger(fresh.tracking_uri).datasets
  assert [run.promotion for run in digits.runs] == ["alice/1", "alice/2"]
