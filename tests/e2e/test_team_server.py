"""The team's server on real parts: PostgreSQL, `mlflow server --app-name
basic-auth` with artifacts served by the server, and tan_tune logging in
the MLflow way (`MLFLOW_TRACKING_USERNAME` / `_PASSWORD`)."""

import json

import mlflow
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
import pytest
import requests
import yaml

from tan_tune.cli import main as cli
from tan_tune.ledger import ledger as ledger_lib
from promote_processes import free_port
import team_server as team_server_lib

pytestmark = pytest.mark.team

# A private run of seconds: 4 steps on the bundled digits.
CONFIG = {"dataset": {"name": "digits"}, "model": {"name": "small-cnn"},
          "privacy": {"batch_size": 64, "noise_multiplier": 1.0, "steps": 4},
          "eval_every": 2, "device": "cpu"}
LOGIN = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")


@pytest.fixture(scope="module")
def alice(team_server):
  return team_server.create_user("alice", "alice-password-1")


@pytest.fixture(scope="module")
def bob(team_server):
  return team_server.create_user("bob", "bob-password-12")


def _log_in(monkeypatch, credentials):
  """This process's MLflow clients as `credentials`, or as nobody."""
  for name in LOGIN:
    monkeypatch.delenv(name, raising=False)
  for name, value in (credentials.env() if credentials else {}).items():
    monkeypatch.setenv(name, value)


WRONG = team_server_lib.Credentials("alice", "not-her-password")


@pytest.mark.usefixtures("alice")  # She exists: her password is wrong.
@pytest.mark.parametrize("credentials", [None, WRONG], ids=["none", "wrong"])
def test_the_server_refuses_a_missing_or_wrong_login(
    team_server, monkeypatch, credentials):
  _log_in(monkeypatch, credentials)
  with pytest.raises(MlflowException) as refused:
    MlflowClient(team_server.tracking_uri).search_experiments()
  assert refused.value.error_code == "UNAUTHENTICATED"
  assert "401" in str(refused.value)


def test_everyone_logs_to_every_experiment_and_only_its_owner_deletes_it(
    team_server, alice, bob, monkeypatch):
  _log_in(monkeypatch, alice)
  shared = MlflowClient(team_server.tracking_uri).create_experiment("shared")
  _log_in(monkeypatch, bob)
  client = MlflowClient(team_server.tracking_uri)
  run = client.create_run(shared)  # EDIT, the team's default.
  client.set_tag(run.info.run_id, "by", "bob")
  with pytest.raises(MlflowException) as refused:
    client.delete_experiment(shared)
  assert refused.value.error_code == "PERMISSION_DENIED"
  assert "403" in str(refused.value)
  # The default is a floor (a READ grant still reads EDIT): DENY narrows.
  _log_in(monkeypatch, alice)
  private = MlflowClient(team_server.tracking_uri).create_experiment("alice's")
  team_server.grant("bob", private, "DENY")
  _log_in(monkeypatch, bob)
  with pytest.raises(MlflowException, match="403"):
    client.create_run(private)


def test_artifacts_go_through_the_server(team_server, alice, monkeypatch):
  _log_in(monkeypatch, alice)
  mlflow.set_tracking_uri(team_server.tracking_uri)
  try:
    with mlflow.start_run(experiment_id=MlflowClient().create_experiment(
        "artifacts")) as run:
      mlflow.log_text("hello", "note.txt")
  finally:
    mlflow.set_tracking_uri(None)
  assert run.info.artifact_uri.startswith("mlflow-artifacts:/")
  [stored] = team_server.artifacts.rglob("note.txt")
  assert stored.read_text() == "hello"


def _train(tmp_path, monkeypatch, team_server, credentials):
  """`tan-tune train` of `CONFIG`, starting the ledger, as `credentials`
  with a HOME of its own (where a server's ledger key lives)."""
  monkeypatch.setenv("HOME", str(tmp_path / "home"))
  _log_in(monkeypatch, credentials)
  config = tmp_path / "run.yaml"
  config.write_text(yaml.safe_dump(CONFIG))
  return cli.main(["train", str(config), "--tracking-uri",
                   team_server.tracking_uri, "--new-ledger",
                   "--target-epsilon", "8"])


def _entries(team_server, monkeypatch):
  _log_in(monkeypatch, team_server.admin)
  return ledger_lib.Ledger(team_server.tracking_uri).entries()


@pytest.mark.usefixtures("alice")
@pytest.mark.parametrize("credentials", [None, WRONG], ids=["none", "wrong"])
def test_a_missing_or_wrong_login_charges_nothing(
    team_server, tmp_path, monkeypatch, credentials):
  before = _entries(team_server, monkeypatch)
  with pytest.raises(SystemExit) as exit_info:
    _train(tmp_path, monkeypatch, team_server, credentials)
  assert exit_info.value.code == 2
  assert not (tmp_path / "home" / ".config" / "tan_tune").exists()  # No key.
  assert _entries(team_server, monkeypatch) == before


@pytest.mark.usefixtures("alice")
def test_a_wrong_login_is_one_clear_line(
    team_server, tmp_path, monkeypatch, capsys):
  with pytest.raises(SystemExit) as exit_info:
    _train(tmp_path, monkeypatch, team_server, WRONG)
  assert exit_info.value.code == 2
  [line] = capsys.readouterr().err.strip().splitlines()
  assert "MLFLOW_TRACKING_PASSWORD" in line


def test_train_charges_the_ledger_on_the_server_across_a_restart(
    team_server, alice, tmp_path, monkeypatch, capsys):
  assert _train(tmp_path, monkeypatch, team_server, alice) == 0
  team_server.stop_mlflow()
  with pytest.raises(requests.ConnectionError):
    requests.get(team_server.tracking_uri, timeout=5)
  team_server.start_mlflow()  # Same port, same PostgreSQL.
  capsys.readouterr()
  assert cli.main(["ledger", "--tracking-uri", team_server.tracking_uri,
                   "--json"]) == 0
  [digits] = json.loads(capsys.readouterr().out)
  assert digits["dataset_name"] == "digits" and digits["budget"] == 8
  [run] = digits["runs"]
  assert run["steps"] == 4 and run["batch_size"] == 64
  [entry] = _entries(team_server, monkeypatch)
  assert entry.promotion.startswith("train/")


def test_a_server_that_does_not_answer_is_one_line_and_charges_nothing(
    tmp_path, monkeypatch, capsys):
  """Not the tier's server: a port nobody listens on. MLflow alone would
  retry for minutes, then fail with a traceback."""
  monkeypatch.setenv("HOME", str(tmp_path / "home"))
  config = tmp_path / "run.yaml"
  config.write_text(yaml.safe_dump(CONFIG))
  uri = f"http://127.0.0.1:{free_port()}"
  with pytest.raises(SystemExit) as exit_info:
    cli.main(["train", str(config), "--tracking-uri", uri, "--new-ledger",
              "--target-epsilon", "8"])
  assert exit_info.value.code == 2
  [line] = capsys.readouterr().err.strip().splitlines()
  assert f"no tracking server answers at {uri}" in line
  assert "Nothing was charged" in line
  assert not (tmp_path / "home" / ".config" / "tan_tune").exists()  # No key.
