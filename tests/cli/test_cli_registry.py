"""`tan-tune registry`: the versions, the champion, one-line refusals."""

import json

from mlflow import MlflowClient
import pytest

import promoted_records
from tan_tune.cli import main as cli_main
from tan_tune.registry import model_registry
from tan_tune.registry import privacy_card


@pytest.fixture
def uri(migrated_mlflow_db):
  client = MlflowClient(migrated_mlflow_db, registry_uri=migrated_mlflow_db)
  run_id = promoted_records.log_run(client, client.create_experiment("e"))
  card = privacy_card.build(
      privacy_card.Published(client.get_run(run_id), "promoted"), None)
  version = model_registry.register(client, "digits", run_id, card)
  model_registry.finish(client, "digits", version, True)
  return migrated_mlflow_db


def _run(capsys, *argv):
  try:
    status = cli_main.main(["registry", *argv])
  except SystemExit as exit_:
    status = exit_.code
  out, err = capsys.readouterr()
  return status, out, err


def test_it_lists_versions_with_their_privacy(uri, capsys):
  status, out, _ = _run(capsys, "digits", "--tracking-uri", uri)
  header, row = out.splitlines()
  assert status == 0
  assert header.split()[:5] == ["version", "aliases", "status", "eps", "delta"]
  assert row.split() == ["1", "candidate", "finished", "2", "0.000696", "rdp",
                         "0.9500", "(ema_accuracy)", "-"]


def test_it_moves_the_champion_within_the_limit(uri, capsys):
  status, out, _ = _run(capsys, "digits", "--champion", "1",
                        "--max-epsilon", "2", "--tracking-uri", uri)
  assert status == 0
  assert out.startswith("digits version 1 is the champion: eps = 2 at")
  assert "models:/digits@champion" in out


@pytest.mark.parametrize("argv, reason", [
    (["digits", "--champion", "1", "--max-epsilon", "1"],
     "refused: digits version 1 has eps = 2 at delta = 0.000696 (rdp), over"
     " --max-epsilon 1"),
    (["digits", "--champion", "4", "--max-epsilon", "8"],
     "refused: digits has no version 4; it has 1"),
    (["mnist"], "refused: no registered model 'mnist'; the store has digits"),
    (["mnist", "--champion", "1", "--max-epsilon", "8"],
     "refused: no registered model 'mnist'"),
])
def test_each_refusal_is_one_line_and_a_non_zero_exit(uri, capsys, argv,
                                                      reason):
  status, out, err = _run(capsys, *argv, "--tracking-uri", uri)
  assert status == 3 and out == ""
  [line] = err.splitlines()
  assert line.startswith(f"tan-tune registry: error: {reason}")


def test_a_champion_needs_a_limit_and_a_store_must_exist(uri, capsys,
                                                         tmp_path):
  status, _, err = _run(capsys, "digits", "--champion", "1",
                        "--tracking-uri", uri)
  assert status == 2 and "--max-epsilon go together" in err
  missing = f"sqlite:///{tmp_path}/none.db"
  status, _, err = _run(capsys, "digits", "--tracking-uri", missing)
  assert status == 3 and f"no MLflow store at {missing}" in err
  assert not (tmp_path / "none.db").exists()


def test_it_prints_a_versions_card(uri, capsys):
  status, out, _ = _run(capsys, "digits", "--card", "1", "--tracking-uri", uri)
  assert status == 0 and out.startswith("# Privacy card: (2, 0.000696)-DP")
  status, _, err = _run(capsys, "digits", "--card", "2", "--tracking-uri", uri)
  assert status == 3 and "digits has no version 2; it has 1" in err


def test_json_lists_every_field(uri, capsys):
  status, out, _ = _run(capsys, "digits", "--json", "--tracking-uri", uri)
  [row] = json.loads(out)
  assert status == 0 and row["version"] == "1" and row["audit"] is None
  assert row["aliases"] == ["candidate"] and row["metric"] == "ema_accuracy"
