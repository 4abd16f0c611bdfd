"""The MLflow store the API records to: its default, and how to open what
it holds.

Every function of the API that records takes a `tracking_uri`; by default
a sqlite file in the working directory. A tracking server shows a run's
experiment on its own page; a local store through `mlflow ui`.
"""

from mlflow import MlflowClient

from tan_tune import mlflow_store

DEFAULT_TRACKING_URI = mlflow_store.DEFAULT_TRACKING_URI
# How to open an experiment's runs: (tracking_uri, experiment_id) -> str.
how_to_view = mlflow_store.how_to_view


def how_to_view_run(tracking_uri: str, run_id: str) -> str:
  """How to open the experiment that holds run `run_id` (`how_to_view`)."""
  experiment = MlflowClient(tracking_uri).get_run(run_id).info.experiment_id
  return mlflow_store.how_to_view(tracking_uri, experiment)
