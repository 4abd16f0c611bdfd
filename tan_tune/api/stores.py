"""The MLflow store the API records to: its default, and how to open what
it holds.

Every function of the API that records takes a `tracking_uri`; by default
a sqlite file in the working directory. A tracking server shows a run's
experiment on its own page; a local store through `mlflow ui`.
"""

from mlflow import MlflowClient

from tan_tune import mlflow_store
# Re-exported as the API's own, so that its reference renders the function.
from tan_tune.mlflow_store import how_to_view

DEFAULT_TRACKING_URI = mlflow_store.DEFAULT_TRACKING_URI
"""The MLflow store a function records to when given none: a sqlite file,
`mlflow.db` in the working directory."""


def how_to_view_run(tracking_uri: str, run_id: str) -> str:
  """How to open the experiment that holds run `run_id` (`how_to_view`).

  Args:
    tracking_uri: the MLflow store that holds the run.
    run_id: the MLflow run's id (`SearchResult.parent_run_id`, say).
  """
  experiment = MlflowClient(tracking_uri).get_run(run_id).info.experiment_id
  return mlflow_store.how_to_view(tracking_uri, experiment)
