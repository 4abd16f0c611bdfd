"""MLflow records of a search: a parent run per search, a child run per trial.

Ray's MLflowLoggerCallback has no parent runs and creates duplicates after
`Tuner.restore`, so tan_tune keeps its own records through `MlflowClient`
(no global active run, nothing exported to workers). Each trial's child run is
tagged with the Ray trial id and looked up by it before one is created: a
resumed search finds the run it already had, so every trial has exactly one.

Only configuration, metrics and derived privacy numbers are logged; never any
training example.
"""

import json
import math
import pathlib
from typing import Any

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from ray.tune.result import AUTO_RESULT_KEYS

from tan_tune import release
from tan_tune.privacy import tuning

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
TRIAL_ID_TAG = "tan_tune.trial_id"
KIND_TAG = "tan_tune.kind"
PARENT_TAG = "mlflow.parentRunId"
STATUS_TAG = "tan_tune.status"
# How the search was accounted (`privacy/tuning.py`), on every run it makes.
TUNING_TAG = "tan_tune.tuning_privacy"
PLOTS_FOLDER = "plots"
# A search's parent run: for a private search, a kind of `release.ALLOW_LIST`.
SEARCH_KIND = "search"
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
  for key, value in loggable_metrics(metrics).items():
    client.log_metric(run_id, key, value, step=step)
  for key, value in report_tags(metrics).items():
    client.set_tag(run_id, key, value)


def log_params(
    client: MlflowClient, run_id: str, params: dict[str, Any]
) -> None:
  """Logs nested params under dotted keys ('reference.batch_size').

  MLflow refuses to change a logged param: a resumed run skips those it has.
  """
  logged = client.get_run(run_id).data.params
  for key, value in release.flatten(params).items():
    if key not in logged:
      client.log_param(run_id, key, value)


_SQLITE = "sqlite:///"


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


def ui_url(experiment_id: str, port: int = 5000) -> str:
  """Where `mlflow ui` shows an experiment's runs: MLflow 3's UI opens on
  its GenAI view unless told the workflow (then it remembers it)."""
  return (f"http://127.0.0.1:{port}/#/experiments/{experiment_id}"
          "?workflowType=machine_learning")


def format_params(params: dict[str, Any]) -> str:
  """'lr=1.108, momentum=0, ...': hyper-parameters as people read them."""
  return ", ".join(
      f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value}"
      for key, value in sorted(params.items()))


def trial_run_name(trial_id: str, params: dict[str, Any]) -> str:
  """A trial's MLflow run name: its id and its hyper-parameters."""
  return f"trial {trial_id}: {format_params(params)}"


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


class SearchRecord:
  """The MLflow side of one search: its experiment, parent run and trials."""

  def __init__(self, tracking_uri: str, experiment_name: str,
               tuning_privacy: str = tuning.NON_PRIVATE,
               out: release.Release | None = None):
    """`out`: a private search's parent run publishes through it alone."""
    self.tracking_uri = tracking_uri
    self.tuning_privacy = tuning_privacy
    self.out = out
    # Absolute: MLflow caches stores by URI, whatever the working directory.
    self.client = MlflowClient(absolute_uri(tracking_uri))
    self.experiment_id = experiment_id(self.client, tracking_uri,
                                       experiment_name)
    self.parent_run_id: str | None = None
    self._trial_runs: dict[str, str] = {}

  def start_parent(
      self, run_name: str, params: dict[str, Any], metrics: dict[str, float],
      tags: dict[str, str], artifacts: list[pathlib.Path],
  ) -> str:
    tags = {TUNING_TAG: self.tuning_privacy, **tags}
    if self.out:
      out, client = self.out, self.client
      self.parent_run_id = out.create_run(client, self.experiment_id,
                                          SEARCH_KIND, run_name, tags)
      out.log_params(client, self.parent_run_id, SEARCH_KIND, params)
      out.log_metrics(client, self.parent_run_id, SEARCH_KIND,
                      loggable_metrics(metrics))
      for path in artifacts:
        out.log_artifact(client, self.parent_run_id, SEARCH_KIND, path)
      return self.parent_run_id
    run = self.client.create_run(self.experiment_id, run_name=run_name,
                                 tags={KIND_TAG: SEARCH_KIND, **tags})
    self.parent_run_id = run.info.run_id
    self._log_params(self.parent_run_id, params)
    for key, value in loggable_metrics(metrics).items():
      self.client.log_metric(self.parent_run_id, key, value)
    for path in artifacts:
      self.client.log_artifact(self.parent_run_id, str(path))
    return self.parent_run_id

  def resume_parent(self, run_id: str) -> None:
    """Continues a parent run of an interrupted search."""
    self.parent_run_id = run_id
    if self.out:
      self.out.resume(self.client, run_id)
    self.client.update_run(run_id, status="RUNNING")

  def trial_run(self, trial_id: str,
                params: dict[str, Any]) -> tuple[str, bool]:
    """The child run of a trial, found or created: (run id, created)."""
    if trial_id in self._trial_runs:
      return self._trial_runs[trial_id], False
    existing = self.client.search_runs(
        [self.experiment_id],
        filter_string=(
            f"tags.`{TRIAL_ID_TAG}` = '{trial_id}'"
            f" and tags.`{PARENT_TAG}` = '{self.parent_run_id}'"
        ),
    )
    if existing:
      run_id, created = existing[0].info.run_id, False
    else:
      run = self.client.create_run(
          self.experiment_id,
          run_name=trial_run_name(trial_id, params),
          tags={
              PARENT_TAG: self.parent_run_id,
              TRIAL_ID_TAG: trial_id,
              KIND_TAG: "trial",
              TUNING_TAG: self.tuning_privacy,
          },
      )
      run_id, created = run.info.run_id, True
    self._trial_runs[trial_id] = run_id
    return run_id, created

  def reopen(self, run_id: str) -> None:
    """Marks a trial's run as running again (a trial restarted or resumed)."""
    self.client.update_run(run_id, status="RUNNING")

  def log_trial_params(self, run_id: str, params: dict[str, Any]) -> None:
    self._log_params(run_id, params)

  def log_trial_metrics(
      self, run_id: str, metrics: dict[str, Any], step: int
  ) -> None:
    log_metrics(self.client, run_id, metrics, step)

  def end_trial(self, run_id: str, status: str) -> None:
    """status: 'finished', 'pruned' or 'failed'."""
    self.client.set_tag(run_id, STATUS_TAG, status)
    self.client.set_terminated(
        run_id, "FAILED" if status == "failed" else "FINISHED"
    )

  def delete_unknown_trials(self, trial_ids: set[str]) -> list[str]:
    """Deletes child runs of trials the search no longer has.

    A driver killed between two of Ray's state snapshots loses the trials it
    started since the last one; after a restore they run again under new ids,
    and their first runs would count twice.

    Returns:
      The deleted run ids.
    """
    children = self.client.search_runs(
        [self.experiment_id],
        filter_string=f"tags.`{PARENT_TAG}` = '{self.parent_run_id}'",
    )
    deleted = []
    for run in children:
      if run.data.tags.get(TRIAL_ID_TAG) not in trial_ids:
        self.client.delete_run(run.info.run_id)
        deleted.append(run.info.run_id)
    return deleted

  def end_parent(self, failed: bool, artifacts: dict[str, Any],
                 pictures: list[pathlib.Path] = ()) -> None:
    """Logs the search's JSON artifacts and its pictures (under plots/), and
    ends its run (a private search's at its start, through `out`)."""
    status = "FAILED" if failed else "FINISHED"
    if self.out:
      for name, content in artifacts.items():
        self.out.log_json(self.client, self.parent_run_id, SEARCH_KIND,
                          content, name)
      self.out.end_run(self.client, self.parent_run_id, status)
      return
    for name, content in artifacts.items():
      self.client.log_text(
          self.parent_run_id, json.dumps(content, indent=2, default=str), name
      )
    for path in pictures:
      self.client.log_artifact(self.parent_run_id, str(path), PLOTS_FOLDER)
    self.client.set_terminated(self.parent_run_id, status)

  def _log_params(self, run_id: str, params: dict[str, Any]) -> None:
    log_params(self.client, run_id, params)
