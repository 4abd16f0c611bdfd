"""The MLflow store every run writes to: its URI, tags, experiments, records.

What the ledger, the private runs, the search and the promotion share: the
default store and where a sqlite store keeps its artifacts (`absolute_uri`,
`store_exists`, `artifact_location`), an experiment found or created
(`experiment_id`), the tags that say what a run is, and a run's params and
report logged (`log_params`, `log_metrics`, one `log_batch` write). It knows
no policy: a private run publishes through its `release.Release`, which
checks what may leave and then writes here.

Only configuration, metrics and derived privacy numbers are logged; never any
training example.
"""

import math
import os
import pathlib
import time
from typing import Any

from mlflow import MlflowClient
from mlflow.entities import Metric
from mlflow.entities import Param
from mlflow.entities import RunTag
from mlflow.exceptions import MlflowException
from ray.tune.result import AUTO_RESULT_KEYS


DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
KIND_TAG = "tan_tune.kind"
PARENT_TAG = "mlflow.parentRunId"
STATUS_TAG = "tan_tune.status"
# How a search was accounted (`privacy/tuning.py`), on every run it makes.
TUNING_TAG = "tan_tune.tuning_privacy"
PLOTS_FOLDER = "plots"
# MLflow 3's UI shows an experiment of this kind as model training.
EXPERIMENT_KIND_TAG, MODEL_TRAINING = (
    "mlflow.experimentKind", "custom_model_development")
# What a report of `trial.run_trial` says in words: tags, not metrics.
REPORT_TAGS = ("private", "simulated", "evaluated_on", "clipping",
               "accountant", "adjacency", "sampling")


def loggable_metrics(metrics: dict[str, Any]) -> dict[str, float]:
  """The finite numbers among `metrics`, less Ray's bookkeeping (pid, ...).

  Flags (private, simulated) are logged as tags instead.
  """
  return {
      key: float(value)
      for key, value in metrics.items()
      if key not in AUTO_RESULT_KEYS
      and isinstance(value, (int, float))
      and not isinstance(value, bool)
      and math.isfinite(value)
  }


def report_tags(metrics: dict[str, Any]) -> dict[str, str]:
  """The words of a report of `trial.run_trial`, as tags."""
  return {f"tan_tune.{flag}": (str(metrics[flag]).lower()
                               if isinstance(metrics[flag], bool)
                               else metrics[flag])
          for flag in REPORT_TAGS if flag in metrics}


def log_metrics(
    client: MlflowClient, run_id: str, metrics: dict[str, Any], step: int,
) -> None:
  """Logs a simulated trial's report: numbers as metrics, flags as tags.
  A private run's go through its `release.Release` instead."""
  log_batch(client, run_id, metrics=loggable_metrics(metrics),
                    tags=report_tags(metrics), step=step)


def log_batch(client: MlflowClient, run_id: str, *,
              params: dict[str, Any] | None = None,
              tags: dict[str, Any] | None = None,
              metrics: dict[str, float] | None = None, step: int = 0,
              timestamp: int | None = None) -> None:
  """One MLflow write (MLflow splits it at its own limits) where one call
  per key would commit once per key: a run logs dozens of params."""
  params, tags, metrics = params or {}, tags or {}, metrics or {}
  if not (params or tags or metrics):
    return
  timestamp = int(time.time() * 1000) if timestamp is None else timestamp
  client.log_batch(
      run_id,
      metrics=[Metric(key, float(value), timestamp, step)
               for key, value in metrics.items()],
      params=[Param(key, str(value)) for key, value in params.items()],
      tags=[RunTag(key, str(value)) for key, value in tags.items()])


_SQLITE = "sqlite:///"


def login() -> dict[str, str]:
  """This process's login to a tracking server, in MLflow's variables, for
  the Ray workers that log in its name: handed over in memory (a Ray
  Train loop config), never in Ray's runtime environment, which its
  dashboard shows."""
  variables = {
      "MLFLOW_TRACKING_USERNAME": os.environ.get("MLFLOW_TRACKING_USERNAME"),
      "MLFLOW_TRACKING_PASSWORD": os.environ.get("MLFLOW_TRACKING_PASSWORD"),
      "MLFLOW_TRACKING_TOKEN": os.environ.get("MLFLOW_TRACKING_TOKEN"),
  }
  return {name: value for name, value in variables.items() if value}


def absolute_uri(tracking_uri: str) -> str:
  """A sqlite URI with its path made absolute, for processes in other folders.

  'sqlite:///mlflow.db' is relative to the working directory; Ray workers may
  run elsewhere.
  """
  if tracking_uri.startswith(_SQLITE) and not tracking_uri.startswith(
      _SQLITE + "/"
  ):
    return _SQLITE + str(pathlib.Path(tracking_uri[len(_SQLITE):]).resolve())
  return tracking_uri


def store_exists(tracking_uri: str) -> bool:
  """False for a sqlite store whose file is not there yet: reading it would
  create it. A server is assumed to exist (it answers or fails on use)."""
  if not tracking_uri.startswith(_SQLITE):
    return True
  return pathlib.Path(absolute_uri(tracking_uri)[len(_SQLITE):]).exists()


def artifact_location(tracking_uri: str, experiment_name: str) -> str | None:
  """Artifacts of a sqlite store go beside its file: <db folder>/mlartifacts.

  MLflow's own default is ./mlruns in whatever folder the experiment happens
  to be created from; a tracking server (None here) decides for itself.
  """
  if not tracking_uri.startswith(_SQLITE):
    return None
  database = pathlib.Path(absolute_uri(tracking_uri)[len(_SQLITE):])
  return (database.parent / "mlartifacts" / experiment_name).as_uri()


def how_to_view(tracking_uri: str, experiment_id: str) -> str:
  """How to open an experiment's runs: a tracking server's own page, or
  `mlflow ui` on a local store.

  Args:
    tracking_uri: the MLflow store that holds the experiment.
    experiment_id: the experiment's id (`SearchResult.experiment_id`, say).
  """
  if tracking_uri.startswith(("http://", "https://")):
    return (f"{tracking_uri.rstrip('/')}/#/experiments/{experiment_id}"
            "?workflowType=machine_learning")
  return (f"mlflow ui --backend-store-uri {tracking_uri}, then"
          f" {ui_url(experiment_id)}")


def ui_url(experiment_id: str, port: int = 5000) -> str:
  """Where `mlflow ui` shows an experiment's runs: MLflow 3's UI opens on
  its GenAI view unless told the workflow (then it remembers it)."""
  return (f"http://127.0.0.1:{port}/#/experiments/{experiment_id}"
          "?workflowType=machine_learning")


def experiment_id(client: MlflowClient, tracking_uri: str, name: str) -> str:
  """The id of experiment `name`, created (artifacts beside sqlite) if new.

  Tagged as model training, so that MLflow 3's UI opens it on its runs
  rather than on the GenAI overview (traces).
  """
  experiment = client.get_experiment_by_name(name)
  if experiment:
    return experiment.experiment_id
  try:
    return client.create_experiment(
        name, artifact_location=artifact_location(tracking_uri, name),
        tags={EXPERIMENT_KIND_TAG: MODEL_TRAINING})
  except MlflowException:  # Another process created it in between.
    return client.get_experiment_by_name(name).experiment_id
