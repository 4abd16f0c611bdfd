"""A promotion's attempts: what resumes, what is a new charge, what refuses.

Each try at promoting a trial is an attempt with its own entry in the privacy
ledger, `ledger.promotion_key(search, trial, attempt)`. The attempt's id goes
to the promotion's state file (`<search dir>/promote/<trial id>/`) before the
ledger is charged, so the same command after a crash resumes the attempt
under the entry it was charged. Any other try (no state file, or one whose
run is gone from the store) is a new attempt: a new charge composed with the
earlier ones, which the budget refuses when they do not fit together.

Before anything is charged, the store is checked: it must hold the search's
MLflow run, and know the dataset (have a ledger entry for it) unless
`--new-ledger` says its ledger starts here. Then the trial's earlier promoted
runs are looked up in every state, deleted ones included: one that finished
or was deleted refuses the promotion, and so does an unfinished one that this
folder's state does not resume.
"""

import json
import os
import pathlib
from typing import Any

from mlflow import MlflowClient
from mlflow.entities import LifecycleStage
from mlflow.entities import Run
from mlflow.entities import ViewType
from mlflow.exceptions import MlflowException

from tan_tune import mlflow_store
from tan_tune.errors import ConfigError
from tan_tune.ledger import charge
from tan_tune.ledger import ledger as ledger_lib
from tan_tune.promote import gate

STATE_FILE = "promotion.json"
SEARCH_RUN_TAG = "tan_tune.search_run_id"
SOURCE_TRIAL_TAG = "tan_tune.source_trial_id"


def folder(search_directory: pathlib.Path, trial_id: str) -> pathlib.Path:
  """Where the promotion of a trial keeps its state."""
  return search_directory / "promote" / trial_id


def read_state(directory: pathlib.Path) -> dict[str, Any]:
  """The promotion's state file; empty before its first attempt."""
  path = directory / STATE_FILE
  return json.loads(path.read_text()) if path.exists() else {}


def write_state(directory: pathlib.Path, state: dict[str, Any]) -> None:
  """Replaces the state file in one step: a crash leaves the old or the new."""
  directory.mkdir(mode=0o700, parents=True, exist_ok=True)
  partial = directory / (STATE_FILE + ".partial")
  partial.write_text(json.dumps(state, indent=2))
  os.replace(partial, directory / STATE_FILE)


def current(tracking_uri: str, state: dict[str, Any]) -> str:
  """The attempt a promotion charges: its state's while that can go on (no
  run yet, or its run is in the store, neither deleted nor finished), else a
  new one."""
  attempt = state.get("attempt")
  if attempt and state.get("run_id") is None:
    return attempt
  run = _find_run(tracking_uri, state["run_id"]) if attempt else None
  if run and (run.info.lifecycle_stage == LifecycleStage.ACTIVE
              and run.data.tags.get(mlflow_store.STATUS_TAG) != "finished"):
    return attempt
  return ledger_lib.new_attempt()


def check_store(ledger: ledger_lib.Ledger, search_run_id: str,
                entry: ledger_lib.Entry, new_ledger: bool) -> str:
  """The store must hold the search and its dataset's ledger (or be told,
  by `new_ledger`, that the ledger starts here).

  Returns:
    the search's experiment, where the promoted run goes.

  Raises:
    ConfigError: the search's run is not in the store, or the store has no
      ledger entry for the dataset and `new_ledger` is False.
  """
  search = _find_run(ledger.tracking_uri, search_run_id)
  if search is None:
    raise ConfigError(
        "--tracking-uri", ledger.tracking_uri,
        f"the store that holds the search's MLflow run {search_run_id},"
        " which is not in this one")
  charge.require_known_dataset(ledger, entry.dataset_identity,
                                entry.dataset_name, new_ledger)
  return search.info.experiment_id


def _find_run(tracking_uri: str, run_id: str) -> Run | None:
  """The run, or None when the store does not hold it."""
  # Reading a sqlite store that is not there would create it.
  if not mlflow_store.store_exists(tracking_uri):
    return None
  try:
    return MlflowClient(tracking_uri).get_run(run_id)
  except MlflowException as error:
    if error.error_code != "RESOURCE_DOES_NOT_EXIST":
      raise
    return None


def earlier_runs(client: MlflowClient, experiment_id: str,
                 search_run_id: str, trial_id: str) -> list[Run]:
  """The trial's promoted runs, in every state, deleted ones included."""
  return client.search_runs(
      [experiment_id],
      filter_string=(
          f"tags.`{SEARCH_RUN_TAG}` = '{search_run_id}'"
          f" and tags.`{SOURCE_TRIAL_TAG}` = '{trial_id}'"
          f" and tags.`{mlflow_store.KIND_TAG}` = 'promoted'"),
      run_view_type=ViewType.ALL)


def refuse_earlier(runs: list[Run], trial_id: str, state: dict[str, Any],
                   directory: pathlib.Path) -> None:
  """Refuses a second reference run of the trial: it would spend the budget
  again, and the first counts whatever became of its MLflow run.

  Raises:
    PromotionRefused: an earlier promoted run finished or was deleted, or
      did not finish and is not the one `state` resumes.
  """
  for run in runs:
    deleted = run.info.lifecycle_stage == LifecycleStage.DELETED
    if deleted or run.data.tags.get(mlflow_store.STATUS_TAG) == "finished":
      since = " (deleted since; its charge stays)" if deleted else ""
      raise gate.PromotionRefused(
          f"trial {trial_id} was already promoted: MLflow run"
          f" {run.info.run_id}{since}. A second reference run on the same"
          " data would spend the privacy budget again")
  others = [run.info.run_id for run in runs
            if run.info.run_id != state.get("run_id")]
  if others:
    raise gate.PromotionRefused(
        f"an earlier promotion of trial {trial_id} (MLflow run {others[0]})"
        f" did not finish and its state is not in {directory}: restore that"
        " folder to resume it. Promoting the trial anew would spend the"
        " privacy budget again")


def link(ledger: ledger_lib.Ledger, entry: ledger_lib.Entry,
         run_id: str) -> None:
  """Names the run in the attempt's ledger entry: an entry pays for one run.

  Raises:
    PromotionRefused: the entry already names another run (or is gone); the
      run, which has trained nothing, is marked FAILED.
  """
  if not ledger.link(entry.promotion, run_id):
    ledger.client.set_terminated(run_id, "FAILED")
    raise gate.PromotionRefused(
        f"the ledger entry of this attempt ({entry.promotion}) already names"
        f" another MLflow run, or is gone: an entry pays for one run only."
        f" MLflow run {run_id} trained nothing and is marked FAILED")
