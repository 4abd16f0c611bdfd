"""What promote reads of a finished search: its space, leaderboard, winner
(`best.json`) and MLflow parent run, from the search directory or from the
parent run's artifacts; and which trial to promote."""

import dataclasses
import json
import pathlib
import tempfile
from typing import Any

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from tan_tune import mlflow_store
from tan_tune.errors import ConfigError
from tan_tune.search import modes
from tan_tune.search import resolved as resolved_lib
from tan_tune.search import search_files
from tan_tune.search import space as search_space_lib
from tan_tune.search import tuning_mode


@dataclasses.dataclass(frozen=True)
class SearchOutcome:
  """What promote reads of a finished search.

  Attributes:
    resolved: the search file as the search ran it, resolved against its
      data then (N, delta, the reference triplet).
    leaderboard: every trial, best first (`search_files.LEADERBOARD_FILE`).
    winner_id: the trial `search_files.BEST_FILE` names, promoted when no
      other is asked for; None when no trial finished.
    parent_run_id: the search's MLflow parent run.
    tracking_uri: where that run lives.
    directory: where promotions of this search keep their state.
  """

  resolved: resolved_lib.ResolvedSearch
  leaderboard: list[dict[str, Any]]
  winner_id: str | None
  parent_run_id: str
  tracking_uri: str
  directory: pathlib.Path

  @property
  def space(self) -> search_space_lib.SearchSpace:
    return self.resolved.space

  @property
  def dataset_size(self) -> int:
    """N, as the search saw it."""
    return self.resolved.dataset_size


def load_search_directory(
    directory: pathlib.Path, tracking_uri: str | None = None
) -> SearchOutcome:
  """Reads a search directory written by `tan-tune search`.

  Raises:
    ConfigError: no finished search there.
  """
  directory = pathlib.Path(directory)
  state_path = _require(directory, search_files.STATE_FILE,
                        "a search directory (one holding {name}), e.g."
                        " runs/<search name>")
  _require(directory, search_files.RESOLVED_FILE,
           "a search directory of this version of tan_tune (one holding"
           " {name}); run the search again")
  resolved = resolved_lib.load(directory)
  modes.for_space(resolved.space).refuse_promotion("SEARCH_DIR",
                                                   str(directory))
  leaderboard_path = _require(
      directory, search_files.LEADERBOARD_FILE,
      "a finished search; this one has no {name}: finish it with `tan-tune"
      " search SPACE --resume`")
  state = json.loads(state_path.read_text())
  return SearchOutcome(
      resolved=resolved,
      leaderboard=json.loads(leaderboard_path.read_text()),
      winner_id=_winner_id(directory / search_files.BEST_FILE),
      parent_run_id=state["parent_run_id"],
      tracking_uri=tracking_uri or state["tracking_uri"],
      directory=directory.resolve(),
  )


def _winner_id(best_path: pathlib.Path) -> str | None:
  """The trial a search's `best.json` names; None when no trial finished
  (the search then writes no file, and logs null to MLflow)."""
  best = json.loads(best_path.read_text()) if best_path.exists() else None
  return best["trial_id"] if best else None


def _require(directory: pathlib.Path, name: str,
             allowed: str) -> pathlib.Path:
  """directory / name, or a ConfigError on SEARCH_DIR saying `allowed`."""
  path = directory / name
  if not path.exists():
    raise ConfigError("SEARCH_DIR", str(directory), allowed.format(name=name))
  return path


def load_search_run(
    run_id: str, tracking_uri: str, storage: pathlib.Path
) -> SearchOutcome:
  """Reads a finished search from its MLflow parent run's artifacts.

  Args:
    run_id: the parent run's id.
    tracking_uri: the MLflow server or store holding it.
    storage: the promotion's state goes to storage/<search name>.

  Raises:
    ConfigError: no such run, or not the parent run of a finished search.
  """
  tracking_uri = mlflow_store.absolute_uri(tracking_uri)
  client = MlflowClient(tracking_uri)
  try:
    run = client.get_run(run_id)
  except MlflowException:
    raise ConfigError(
        "--mlflow-run", run_id,
        f"the id of a search's parent run in {tracking_uri}") from None
  if run.data.tags.get(mlflow_store.KIND_TAG) != "search":
    raise ConfigError(
        "--mlflow-run", run_id,
        "a search's parent run (tagged tan_tune.kind = search); this run is"
        f" tagged {run.data.tags.get(mlflow_store.KIND_TAG)!r}")
  strategy = tuning_mode.found(run.data.tags.get(mlflow_store.TUNING_TAG))
  if strategy is not None:
    strategy.refuse_promotion("--mlflow-run", run_id)
  with tempfile.TemporaryDirectory() as folder:
    try:
      for name in (search_files.SPACE_FILE, search_files.RESOLVED_FILE,
                   search_files.LEADERBOARD_FILE, search_files.BEST_FILE):
        client.download_artifacts(run_id, name, folder)
    except (MlflowException, OSError):
      raise ConfigError(
          "--mlflow-run", run_id,
          f"a finished search; this run has no {search_files.LEADERBOARD_FILE}"
          " artifact yet") from None
    downloaded = pathlib.Path(folder)
    resolved = resolved_lib.load(downloaded)
    leaderboard = json.loads(
        (downloaded / search_files.LEADERBOARD_FILE).read_text())
    winner_id = _winner_id(downloaded / search_files.BEST_FILE)
  return SearchOutcome(
      resolved=resolved,
      leaderboard=leaderboard,
      winner_id=winner_id,
      parent_run_id=run_id,
      tracking_uri=tracking_uri,
      directory=(pathlib.Path(storage) / resolved.space.name).resolve(),
  )


def pick_trial(
    outcome: SearchOutcome, trial_id: str | None = None
) -> dict[str, Any]:
  """The leaderboard row of `trial_id`, or of the winner (`best.json`).

  Raises:
    ConfigError: an unknown or unfinished trial, or no finished trial.
  """
  if trial_id is None:
    if outcome.winner_id is None:
      raise ConfigError("--trial", None,
                        "a finished trial; this search has none to promote")
    trial_id = outcome.winner_id
  for row in outcome.leaderboard:
    if row["trial_id"] == trial_id:
      if row["status"] != "finished":
        raise ConfigError("--trial", trial_id,
                          f"a finished trial; this one {row['status']}")
      return row
  known = ", ".join(r["trial_id"] for r in outcome.leaderboard
                    if r["status"] == "finished") or "none"
  raise ConfigError("--trial", trial_id,
                    f"one of the search's finished trials: {known}")
