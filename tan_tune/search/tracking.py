"""MLflow records of a search: a parent run per search, a child run per trial.

Ray's MLflowLoggerCallback has no parent runs and creates duplicates after
`Tuner.restore`, so tan_tune keeps its own records through `MlflowClient`
(no global active run, nothing exported to workers). Each trial's child run is
tagged with the Ray trial id and looked up by it before one is created: a
resumed search finds the run it already had, so every trial has exactly one.

Only configuration, metrics and derived privacy numbers are logged; never any
training example. The store's own helpers (its URI, tags, experiments)
are `mlflow_store.py`'s.
"""

import json
import pathlib
from typing import Any

from mlflow import MlflowClient

from tan_tune import mlflow_store
from tan_tune.release import release

TRIAL_ID_TAG = "tan_tune.trial_id"
# A search's parent run: for a private search, a kind of `release.ALLOW_LIST`.
SEARCH_KIND = "search"


def format_params(params: dict[str, Any]) -> str:
  """'lr=1.108, momentum=0, ...': hyper-parameters as people read them.

  Args:
    params: the hyper-parameters by name (a leaderboard row's `params`,
      or the winner's).
  """
  return ", ".join(
      f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value}"
      for key, value in sorted(params.items()))


def trial_run_name(trial_id: str, params: dict[str, Any]) -> str:
  """A trial's MLflow run name: its id and its hyper-parameters."""
  return f"trial {trial_id}: {format_params(params)}"


class SearchRecord:
  """The MLflow side of one search: its experiment, parent run and trials."""

  def __init__(self, tracking_uri: str, experiment_name: str,
               tuning_privacy: str = "non_private",
               out: release.Release | None = None):
    """`out`: a private search's parent run publishes through it alone."""
    self.tracking_uri = tracking_uri
    self.tuning_privacy = tuning_privacy
    self.out = out
    # Absolute: MLflow caches stores by URI, whatever the working directory.
    self.client = MlflowClient(mlflow_store.absolute_uri(tracking_uri))
    self.experiment_id = mlflow_store.experiment_id(
        self.client, tracking_uri, experiment_name)
    self.parent_run_id: str | None = None
    self._trial_runs: dict[str, str] = {}

  def start_parent(
      self, run_name: str, params: dict[str, Any], metrics: dict[str, float],
      tags: dict[str, str], artifacts: list[pathlib.Path],
  ) -> str:
    tags = {mlflow_store.TUNING_TAG: self.tuning_privacy, **tags}
    if self.out:
      out, client = self.out, self.client
      self.parent_run_id = out.create_run(client, self.experiment_id,
                                          SEARCH_KIND, run_name, tags)
      out.log_params(client, self.parent_run_id, SEARCH_KIND, params)
      out.log_metrics(client, self.parent_run_id, SEARCH_KIND,
                      mlflow_store.loggable_metrics(metrics))
      for path in artifacts:
        out.log_artifact(client, self.parent_run_id, SEARCH_KIND, path)
      return self.parent_run_id
    run = self.client.create_run(self.experiment_id, run_name=run_name,
                                 tags={mlflow_store.KIND_TAG: SEARCH_KIND,
                                       **tags})
    self.parent_run_id = run.info.run_id
    self._log_params(self.parent_run_id, params)
    for key, value in mlflow_store.loggable_metrics(metrics).items():
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
            f" and tags.`{mlflow_store.PARENT_TAG}` = '{self.parent_run_id}'"
        ),
    )
    if existing:
      run_id, created = existing[0].info.run_id, False
    else:
      run = self.client.create_run(
          self.experiment_id,
          run_name=trial_run_name(trial_id, params),
          tags={
              mlflow_store.PARENT_TAG: self.parent_run_id,
              TRIAL_ID_TAG: trial_id,
              mlflow_store.KIND_TAG: "trial",
              mlflow_store.TUNING_TAG: self.tuning_privacy,
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
    mlflow_store.log_metrics(self.client, run_id, metrics, step)

  def end_trial(self, run_id: str, status: str) -> None:
    """status: 'finished', 'pruned' or 'failed'."""
    self.client.set_tag(run_id, mlflow_store.STATUS_TAG, status)
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
        filter_string=(f"tags.`{mlflow_store.PARENT_TAG}`"
                       f" = '{self.parent_run_id}'"),
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
      self.client.log_artifact(self.parent_run_id, str(path),
                               mlflow_store.PLOTS_FOLDER)
    self.client.set_terminated(self.parent_run_id, status)

  def _log_params(self, run_id: str, params: dict[str, Any]) -> None:
    release.log_new_params(self.client, run_id, params)
