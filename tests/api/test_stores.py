"""How to open what an MLflow store holds (`api/stores.py`)."""

from mlflow import MlflowClient

from tan_tune import api

import mlflow_stores


def test_a_run_is_opened_by_its_experiment(tmp_path):
  uri = mlflow_stores.new_store(tmp_path)
  client = MlflowClient(uri)
  experiment = client.create_experiment("promoted")
  run = client.create_run(experiment)
  assert api.how_to_view_run(uri, run.info.run_id) == api.how_to_view(
      uri, experiment)
  assert experiment in api.how_to_view(uri, experiment)


def test_a_servers_experiment_is_on_its_own_page():
  assert api.how_to_view("http://mlflow:5000/", "7") == (
      "http://mlflow:5000/#/experiments/7?workflowType=machine_learning")
  assert api.DEFAULT_TRACKING_URI.startswith("sqlite:///")
