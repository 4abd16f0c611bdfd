"""Tests of a search's MLflow records and the store helpers under them
(`mlflow_store.py`): URIs, artifact folders, params, metrics."""

import pathlib

from mlflow import MlflowClient
import pytest

from tan_tune import mlflow_store
from tan_tune.release import release
from tan_tune.search import tracking

pytestmark = pytest.mark.usefixtures("migrated_mlflow_db")  # A new store each.


def test_a_relative_sqlite_uri_is_made_absolute(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  assert mlflow_store.absolute_uri("sqlite:///mlflow.db") == (
      f"sqlite:///{tmp_path}/mlflow.db")
  assert mlflow_store.absolute_uri(f"sqlite:///{tmp_path}/x.db") == (
      f"sqlite:///{tmp_path}/x.db")
  assert mlflow_store.absolute_uri("http://127.0.0.1:5000") == (
      "http://127.0.0.1:5000")


def test_sqlite_artifacts_go_beside_the_database(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path.parent)  # Not where the database is.
  uri = f"sqlite:///{tmp_path}/mlflow.db"
  record = tracking.SearchRecord(uri, "where")
  experiment = MlflowClient(uri).get_experiment(record.experiment_id)
  # MLflow 3's UI opens a model-training experiment on its runs.
  assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
  location = experiment.artifact_location
  assert location == (tmp_path / "mlartifacts" / "where").as_uri()
  assert mlflow_store.artifact_location("http://127.0.0.1:5000",
                                       "where") is None
  run_id = record.start_parent("p", {}, {}, {}, [])
  MlflowClient(uri).log_text(run_id, "hello", "note.txt")
  assert list((tmp_path / "mlartifacts" / "where").rglob("note.txt"))
  assert not pathlib.Path("mlruns").exists()


def test_params_are_flattened_and_a_resumed_run_skips_logged_ones(tmp_path):
  uri = f"sqlite:///{tmp_path}/mlflow.db"
  client = MlflowClient(uri)
  run_id = tracking.SearchRecord(uri, "params").start_parent(
      "p", {"reference": {"batch_size": 512}}, {}, {}, [])
  release.log_new_params(client, run_id, {"reference": {"batch_size": 512},
                                          "workers": 2})
  assert client.get_run(run_id).data.params == {
      "reference.batch_size": "512", "workers": "2"}


def test_only_finite_numbers_are_metrics_and_flags_become_tags(tmp_path):
  assert mlflow_store.loggable_metrics({
      "a": 1, "b": float("inf"), "c": "x", "d": True, "pid": 3,
      "e": 0.5}) == {"a": 1.0, "e": 0.5}
  uri = f"sqlite:///{tmp_path}/mlflow.db"
  client = MlflowClient(uri)
  run_id = tracking.SearchRecord(uri, "m").start_parent("p", {}, {}, {}, [])
  mlflow_store.log_metrics(client, run_id, {"step": 3, "accuracy": 0.5,
                                            "private": False}, step=3)
  run = client.get_run(run_id)
  assert run.data.metrics["accuracy"] == 0.5
  assert run.data.tags["tan_tune.private"] == "false"
