"""Promotion and the privacy ledger's store (issue 26): a store that never
saw the dataset needs --new-ledger, one without the search is an error, each
attempt is its own charge, and deleted runs still count.

`searches` (conftest.py) writes a finished search directory by hand, and
`_search_in_store` its parent run. No training: the tests that go through
`run_promotion` use the session's local Ray and stop where the reference run
would train.
"""

import json
import re

from mlflow import MlflowClient
from mlflow.entities import ViewType
import pytest

from tan_tune import mlflow_store
from tan_tune.cli import main as cli
from tan_tune.ledger import ledger as ledger_lib
from tan_tune.promote import attempts
from tan_tune.promote import plan as promotion
from tan_tune.promote import run as promote
from tan_tune.promote import search_outcome
from tan_tune.search import search_files


def _search_in_store(tmp_path, directory):
  """The search's parent run in its store, as `tan-tune search` leaves it;
  the store has no ledger yet."""
  uri = f"sqlite:///{tmp_path}/mlflow.db"
  client = MlflowClient(uri)
  experiment = mlflow_store.experiment_id(client, uri, "digits")
  run = client.create_run(experiment, tags={mlflow_store.KIND_TAG: "search"})
  state = json.loads((directory / search_files.STATE_FILE).read_text())
  state["parent_run_id"] = run.info.run_id
  (directory / search_files.STATE_FILE).write_text(json.dumps(state))
  return client, experiment


@pytest.mark.usefixtures("migrated_mlflow_db")
def test_a_store_without_the_datasets_ledger_needs_new_ledger(
    searches, tmp_path, capsys):
  """Issue 26: a fresh --tracking-uri looked like an unspent budget."""
  directory = searches.write(tmp_path)
  client, experiment = _search_in_store(tmp_path, directory)
  assert cli.main(["promote", str(directory), "--plan"]) == 0
  out = capsys.readouterr().out
  assert "no earlier private run in sqlite:///" in out
  assert (f"warning: sqlite:///{tmp_path}/mlflow.db has no ledger entry for"
          " digits") in out
  assert "pass --new-ledger to start its ledger" in out
  assert cli.main(["promote", str(directory), "--plan", "--new-ledger"]) == 0
  assert "--new-ledger starts the dataset's ledger" in (
      capsys.readouterr().out)
  with pytest.raises(SystemExit) as exit_:
    cli.main(["promote", str(directory)])
  assert exit_.value.code == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "Traceback" not in err
  assert "--new-ledger: 'unset' is not allowed" in err
  assert "has no ledger entry for digits" in err and "--tracking-uri" in err
  # Nothing was charged, no run was opened.
  [search_run] = client.search_runs([experiment], run_view_type=ViewType.ALL)
  assert search_run.data.tags[mlflow_store.KIND_TAG] == "search"
  assert client.get_experiment_by_name(ledger_lib.LEDGER_EXPERIMENT) is None
  assert not (directory / "promote").exists()
  plan = promotion.plan_promotion(search_outcome.load_search_directory(directory))
  assert not plan.dataset_in_ledger and not plan.new_ledger


@pytest.mark.parametrize("argv, store, exists", [
    ([], "mlflow", False), (["--new-ledger"], "mlflow", False),
    (["--new-ledger"], "mlflow", True),
    (["--new-ledger", "--tracking-uri", "sqlite:///fresh.db"], "fresh",
     False)])
def test_a_store_without_the_search_is_a_one_line_error(
    searches, tmp_path, capsys, monkeypatch, argv, store, exists):
  """Issue 26: promote looked the search's run up in a store that does not
  have it, after charging that store, and crashed."""
  monkeypatch.chdir(tmp_path)
  directory = searches.write(tmp_path)  # Its parent run is nowhere.
  if exists:
    MlflowClient(f"sqlite:///{tmp_path}/{store}.db").search_experiments()
    capsys.readouterr()  # MLflow's own lines, creating it.
  with pytest.raises(SystemExit) as exit_:
    cli.main(["promote", str(directory), *argv])
  assert exit_.value.code == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "Traceback" not in err
  assert err.startswith(
      f"tan-tune promote: error: --tracking-uri: 'sqlite:///{tmp_path}/"
      f"{store}.db' is not allowed; the store that holds the search's MLflow"
      " run parent, which is not in this one")
  # Nothing charged, no run opened; a store that was not there still is not.
  assert list(tmp_path.glob("*.db")) == (
      [tmp_path / f"{store}.db"] if exists else [])
  if exists:
    assert ledger_lib.Ledger(f"sqlite:///{tmp_path}/{store}.db").entries() == []
  assert not (directory / "promote").exists()


def _promote_until_training(directory, monkeypatch, *argv):
  """`tan-tune promote` through its ledger charge and MLflow run, stopped
  where the reference run would train: its exit status."""
  def no_training(*_):
    raise RuntimeError("stopped before training")
  monkeypatch.setattr(promote, "_train", no_training)
  with pytest.raises(SystemExit) as exit_:
    cli.main(["promote", str(directory), *argv])
  return exit_.value.code


def _promoted_runs(client, experiment):
  return client.search_runs(
      [experiment],
      filter_string=f"tags.`{mlflow_store.KIND_TAG}` = 'promoted'",
      run_view_type=ViewType.ALL)


@pytest.mark.usefixtures("migrated_mlflow_db")
def test_new_ledger_charges_and_an_attempt_resumes_under_its_entry(
    searches, tmp_path, capsys, monkeypatch, local_ray):
  directory = searches.write(tmp_path, noise_multiplier=4.0)
  client, experiment = _search_in_store(tmp_path, directory)
  assert _promote_until_training(directory, monkeypatch, "--new-ledger") == 1
  ledger = ledger_lib.Ledger(f"sqlite:///{tmp_path}/mlflow.db")
  [entry] = ledger.entries()
  [run] = _promoted_runs(client, experiment)
  assert entry.promoted_run_id == run.info.run_id
  state = attempts.read_state(directory / "promote" / "best")
  assert entry.promotion == ledger_lib.promotion_key(
      state["search_run_id"], "best", state["attempt"])
  # The same command resumes the attempt: the same run, the same charge.
  assert _promote_until_training(directory, monkeypatch) == 1
  assert ledger.entries() == [entry]
  assert [r.info.run_id for r in _promoted_runs(client, experiment)] == [
      run.info.run_id]
  # Without its state the run is not resumed, nor run again.
  (directory / "promote" / "best").rename(tmp_path / "kept")
  capsys.readouterr()
  assert _promote_until_training(directory, monkeypatch) == 3
  err = capsys.readouterr().err
  assert (f"an earlier promotion of trial best (MLflow run {run.info.run_id})"
          " did not finish and its state is not in") in err
  assert "restore that folder to resume it" in err and "delete" not in err
  assert ledger.entries() == [entry]
  assert len(_promoted_runs(client, experiment)) == 1


@pytest.mark.usefixtures("migrated_mlflow_db")
def test_an_attempt_stopped_before_its_plan_was_logged_logs_it_on_resume(
    searches, tmp_path, monkeypatch, local_ray):
  """A promotion stopped between making its MLflow run and logging its plan
  left a run without params, and its privacy card could not be made."""
  directory = searches.write(tmp_path, noise_multiplier=4.0)
  client, experiment = _search_in_store(tmp_path, directory)
  log_plan = promote._log_plan  # pylint: disable=protected-access

  def stopped(*_):
    raise RuntimeError("stopped before the plan was logged")
  monkeypatch.setattr(promote, "_log_plan", stopped)
  with pytest.raises(RuntimeError, match="stopped before the plan"):
    cli.main(["promote", str(directory), "--new-ledger"])
  [run] = _promoted_runs(client, experiment)
  assert not run.data.params
  monkeypatch.setattr(promote, "_log_plan", log_plan)
  assert _promote_until_training(directory, monkeypatch) == 1
  [resumed] = _promoted_runs(client, experiment)
  assert resumed.info.run_id == run.info.run_id
  assert resumed.data.params["trial_id"] == "best"


@pytest.mark.usefixtures("migrated_mlflow_db")
@pytest.mark.parametrize("sigma, refusal", [
    (2.0555, r"already spent eps = 7\.9266 in .* > its budget 8"),
    (4.0, "already promoted: MLflow run {run} \\(deleted since")])
def test_a_deleted_promotion_still_counts_and_its_trial_is_refused(
    searches, tmp_path, capsys, monkeypatch, local_ray, sigma, refusal):
  """Issue 26: deleting the promoted run and promoting again trained a
  second full-budget run, the one charge re-linked to it."""
  directory = searches.write(tmp_path, noise_multiplier=sigma)
  client, experiment = _search_in_store(tmp_path, directory)
  assert _promote_until_training(directory, monkeypatch, "--new-ledger") == 1
  ledger = ledger_lib.Ledger(f"sqlite:///{tmp_path}/mlflow.db")
  charged = ledger.entries()
  [run] = _promoted_runs(client, experiment)
  [entry_run] = client.search_runs([ledger.experiment_id])
  for deleted in (run, entry_run):  # The run, then its ledger entry.
    client.delete_run(deleted.info.run_id)
    capsys.readouterr()
    assert _promote_until_training(directory, monkeypatch) == 3
    assert re.search(refusal.format(run=run.info.run_id),
                     capsys.readouterr().err)
    assert ledger.entries() == charged  # Counted, never re-linked.
    assert len(_promoted_runs(client, experiment)) == 1


@pytest.mark.usefixtures("migrated_mlflow_db")
def test_an_attempt_whose_entry_names_another_run_is_refused(
    searches, tmp_path, capsys, monkeypatch, local_ray):
  """Two drivers on one state folder: the entry pays for the first run."""
  directory = searches.write(tmp_path, noise_multiplier=4.0)
  client, experiment = _search_in_store(tmp_path, directory)
  attempts.write_state(directory / "promote" / "best",
                       {"attempt": "a1", "run_id": None})
  plan = promotion.plan_promotion(search_outcome.load_search_directory(directory))
  ledger = ledger_lib.Ledger(f"sqlite:///{tmp_path}/mlflow.db")
  ledger.reserve(plan.ledger_entry)
  ledger.link(plan.ledger_entry.promotion, "the-other-drivers-run")
  capsys.readouterr()
  assert _promote_until_training(directory, monkeypatch) == 3
  assert "already names another MLflow run" in capsys.readouterr().err
  [entry] = ledger.entries()
  assert entry.promoted_run_id == "the-other-drivers-run"
  [run] = _promoted_runs(client, experiment)
  assert run.info.status == "FAILED"
