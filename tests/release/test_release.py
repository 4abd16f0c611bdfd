"""The one release path: its allow-list refuses, its times are the start."""

import os
import pathlib
import time

from mlflow import MlflowClient
import pytest

from tan_tune import mlflow_store
from tan_tune.release import release

pytestmark = pytest.mark.usefixtures("migrated_mlflow_db")  # A new store each.


@pytest.fixture
def store(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  uri = f"sqlite:///{tmp_path}/mlflow.db"
  client = MlflowClient(uri)
  return uri, client, client.create_experiment("e")


def test_every_record_of_a_private_run_is_timed_at_its_start(store, tmp_path):
  uri, client, experiment = store
  out = release.Release(time.time() - 100)  # t_0, 100 s ago.
  run_id = out.create_run(client, experiment, "promoted", "r",
                          {"tan_tune.private": "true"})
  out.log_metrics(client, run_id, "promoted", {"accuracy": 0.9}, step=40)
  path = tmp_path / "privacy.json"
  path.write_text("{}")
  out.log_artifact(client, run_id, "promoted", path)
  out.end_run(client, run_id)
  run = client.get_run(run_id)
  assert run.info.start_time == run.info.end_time == out.started_ms
  [metric] = client.get_metric_history(run_id, "accuracy")
  assert (metric.timestamp, metric.step) == (out.started_ms, 40)
  assert run.data.tags["tan_tune.kind"] == "promoted"
  del uri


@pytest.mark.parametrize("what, call", [
    ("metrics", lambda o, c, r: o.log_metrics(c, r, "promoted",
                                              {"train_loss": 0.3})),
    ("metrics", lambda o, c, r: o.log_metrics(c, r, "promoted",
                                              {"clip_fraction": 0.5})),
    ("params", lambda o, c, r: o.log_params(c, r, "promoted",
                                            {"dataset_identity": "4ce5"})),
    ("tags", lambda o, c, r: o.set_tags(c, r, "promoted",
                                        {"tan_tune.examples_per_second": "9"})),
    ("artifacts", lambda o, c, r: o.log_artifact(
        c, r, "promoted", pathlib.Path(__file__), "code")),
])
def test_what_the_allow_list_leaves_out_is_refused(store, what, call):
  _, client, experiment = store
  out = release.Release()
  run_id = out.create_run(client, experiment, "promoted", "r", {})
  with pytest.raises(release.NotReleasable, match=what):
    call(out, client, run_id)
  assert client.get_run(run_id).data.metrics == {}


def test_a_ledger_entry_takes_no_metric_but_epsilon(store):
  _, client, experiment = store
  out = release.Release()
  run_id = out.create_run(client, experiment, "ledger-entry", "r", {})
  out.log_metrics(client, run_id, "ledger-entry", {"epsilon": 2.0})
  with pytest.raises(release.NotReleasable):
    out.log_metrics(client, run_id, "ledger-entry", {"seconds": 12.0})


def test_seal_stamps_what_the_run_changed_and_nothing_older(store, tmp_path):
  uri, client, experiment = store
  old = tmp_path / "runs" / "old.json"
  old.parent.mkdir()
  old.write_text("{}")
  long_ago = time.time() - 1000
  os.utime(old, (long_ago, long_ago))
  out = release.Release(time.time() - 100)
  out.covers(tmp_path / "runs", uri)
  made = tmp_path / "runs" / "search" / "promote" / "model.pt"
  made.parent.mkdir(parents=True)
  made.write_bytes(b"weights")
  run_id = out.create_run(client, experiment, "promoted", "r", {})
  path = tmp_path / "privacy.json"
  path.write_text("{}")
  out.log_artifact(client, run_id, "promoted", path)
  outside = tmp_path.parent / f"{tmp_path.name}-outside"
  outside.mkdir()
  out.seal()
  later = [p for p in [tmp_path, *tmp_path.rglob("*")]
           if p.lstat().st_mtime > out.started]
  assert later == []
  assert old.stat().st_mtime == pytest.approx(long_ago)
  assert made.stat().st_mtime == out.started
  assert (tmp_path / "mlflow.db").stat().st_mtime == out.started
  assert outside.stat().st_mtime > out.started  # Not the run's.
  outside.rmdir()


def test_a_resumed_run_keeps_its_first_start(store):
  _, client, experiment = store
  first = release.Release(time.time() - 500)
  run_id = first.create_run(client, experiment, "promoted", "r", {})
  again = release.Release()
  again.resume(client, run_id)
  assert again.started_ms == first.started_ms


def test_one_batch_holds_what_one_call_per_key_would(store):
  """More params than MLflow takes in one request (100), tags and metrics
  as strings and floats, and a resumed run's params skipped, not refused."""
  _, client, experiment = store
  run_id = client.create_run(experiment).info.run_id
  mlflow_store.log_batch(client, run_id,
                         params={f"p{i}": i for i in range(150)},
                         tags={"flag": True}, metrics={"m": 2}, step=3,
                         timestamp=1234)
  release.log_new_params(client, run_id, {"p0": 0, "new": {"x": 1.5}})
  run = client.get_run(run_id)
  assert run.data.params == {**{f"p{i}": str(i) for i in range(150)},
                             "new.x": "1.5"}
  assert run.data.tags["flag"] == "True"
  [metric] = client.get_metric_history(run_id, "m")
  assert (metric.value, metric.timestamp, metric.step) == (2.0, 1234, 3)


def test_a_folder_is_released_whole_at_the_start_or_not_at_all(store,
                                                                 tmp_path):
  _, client, experiment = store
  out = release.Release(time.time() - 100)
  run_id = out.create_run(client, experiment, "promoted", "r", {})
  folder = tmp_path / "mlflow_model"
  (folder / "code" / "team").mkdir(parents=True)
  (folder / "artifacts").mkdir(parents=True)
  # A program's files, and a factory's (its code, arguments and weights).
  for name in ("MLmodel", "artifacts/program.pt2", "artifacts/weights.pt",
               "artifacts/factory.json", "code/team/models.py"):
    (folder / name).write_text("x")
  out.log_folder(client, run_id, "promoted", folder)
  assert sorted(a.path for a in client.list_artifacts(
      run_id, "mlflow_model")) == ["mlflow_model/MLmodel",
                                   "mlflow_model/artifacts",
                                   "mlflow_model/code"]
  assert {p.stat().st_mtime for p in [folder, *folder.rglob("*")]} == {
      out.started}
  (folder / "code" / "team" / "data.csv").write_text("x")  # Not code.
  with pytest.raises(release.NotReleasable,
                     match="mlflow_model/code/team/data.csv"):
    out.log_folder(client, run_id, "promoted", folder)
