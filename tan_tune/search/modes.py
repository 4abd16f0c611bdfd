"""How a search is accounted, as one strategy object per `tuning_privacy`.

The driver (`driver.py`) runs every search the same way and asks its mode
at each point where the ways of tuning differ (`privacy/tuning.py` has the
maths, `tuning_mode.py` the file's checks):

* `SimulatedSearch` (`non_private`, TAN's practice): trials simulate the
  reference run at small batches on the private data, each with an MLflow
  run; Optuna's TPE (or random) search; the search is not accounted and its
  winner is what `promote` takes.
* `PublicDataSearch` (`public_data`): the same on a public dataset; the
  promoted run's eps is then the end-to-end eps.
* `PrivateRandomSearch` (`private_random_search`, Papernot & Steinke): every
  trial a private run at the reference triplet, the search charged to the
  ledger before it starts, K trials drawn secretly, nothing of a trial
  published, the best released by the search itself and never promoted.

A new way of tuning is one new class here and its name in `MODES`.
"""

import contextlib
import dataclasses
import json
import pathlib
from typing import Any, ContextManager

import optuna
from ray import tune

from tan_tune.errors import ConfigError
from tan_tune.ledger import charge
from tan_tune.ledger import custody
from tan_tune.ledger import ledger as ledger_lib
from tan_tune.privacy import tuning
from tan_tune.release import boundary
from tan_tune.search import callbacks
from tan_tune.search import private_search
from tan_tune.search import progress
from tan_tune.search import resolved as resolved_lib
from tan_tune.search import results as results_lib
from tan_tune.search import search_files
from tan_tune.search import space as space_lib
from tan_tune.search import tracking
from tan_tune.search import trial_record
from tan_tune.search import tuning_mode
from tan_tune.training import checkpoint_file
from tan_tune.training import datasets
from tan_tune.training import trial_config

# What names a private search's place in a refusal (`custody.py`).
STORAGE_FIELD = "--storage"


@dataclasses.dataclass(frozen=True)
class Finished:
  """What a search's end leaves: its leaderboard (empty when its trials are
  secret), its winner or release, and whether it stopped before its end."""

  leaderboard: list[dict[str, Any]]
  best: dict[str, Any] | None
  stopped: bool = False


class SimulatedSearch:
  """Trials simulate the reference run; the search is not accounted."""

  name = tuning.NON_PRIVATE
  note = ("trials are simulations, not private; the search is not"
          " accounted; only the promoted run is")
  # Trials publish what they like (they are not private runs).
  secret = False
  select_on_test_warning = space_lib.SELECT_ON_TEST_WARNING

  def check_options(self, num_samples: int | None,
                    register: str | None) -> None:
    """Raises ConfigError for a command-line option the mode forbids."""
    if register:
      raise ConfigError(
          "--register", register,
          "unset: this search releases no model (its trials are"
          " simulations); promote its winner with `tan-tune promote"
          " --register`, or register a private random search's release")

  def check_data(self, space: space_lib.SearchSpace,
                 data: datasets.Dataset) -> None:
    """Raises ConfigError for data the mode cannot search, once loaded."""

  def check_resume(self, state: dict[str, Any],
                   directory: pathlib.Path) -> None:
    """Raises FileExistsError for a search state that cannot resume."""

  def protect(self, directory: pathlib.Path) -> None:
    """The new search directory, before anything is written in it."""

  def held(self, directory: pathlib.Path) -> ContextManager[None]:
    """Around the whole search: whether another process may run in its
    directory meanwhile."""
    return contextlib.nullcontext()

  def check_room(self, ledger: ledger_lib.Ledger,
                 resolved: resolved_lib.ResolvedSearch,
                 examples: datasets.Examples | None,
                 new_ledger: bool) -> None:
    """Before anything is written: the search charges nothing. `examples`:
    the private data's (`datasets.examples`); None on a resumed search."""

  def parent_fields(self, resolved: resolved_lib.ResolvedSearch,
                    data: datasets.Dataset
                    ) -> tuple[dict[str, Any], dict[str, float]]:
    """The search's own MLflow params and metrics, beyond the reference's."""
    space = resolved.space
    return {
        "simulation_batch_sizes": list(space.simulation_batch_sizes),
        "compute_saving": [space.reference.batch_size / b
                           for b in space.simulation_batch_sizes],
        "num_trials": space.num_trials,
        "public_dataset": (space.public_dataset.title if space.public_dataset
                           else None),
    }, {}

  def start(self, ledger: ledger_lib.Ledger,
            resolved: resolved_lib.ResolvedSearch,
            examples: datasets.Examples | None,
            record: tracking.SearchRecord, new_ledger: bool,
            register: str | None,
            directory: pathlib.Path) -> dict[str, Any]:
    """Once the parent run exists: what the search state keeps besides it."""
    return {}

  def seal(self, ledger: ledger_lib.Ledger,
           state: dict[str, Any]) -> checkpoint_file.Seal | None:
    """How the trials seal their checkpoints (`custody.py`): a
    simulation's are not sealed."""
    return None

  def trial_count(self, state: dict[str, Any], space: space_lib.SearchSpace,
                  num_samples: int | None) -> int:
    return num_samples or space.num_trials

  def search_algorithm(
      self, space: space_lib.SearchSpace) -> optuna.samplers.BaseSampler:
    if space.search_algorithm == "random":
      return optuna.samplers.RandomSampler(seed=space.seed)
    return optuna.samplers.TPESampler(seed=space.seed, multivariate=True,
                                      group=True)

  def study_copy(self, directory: pathlib.Path) -> str | None:
    """Where Optuna's study is copied for plots and `optuna-dashboard`."""
    return results_lib.study_storage(directory)

  def callbacks(self, resolved: resolved_lib.ResolvedSearch,
                tracking_uri: str, record: tracking.SearchRecord,
                trial_count: int) -> list[tune.Callback]:
    """One MLflow run per trial, and the live view."""
    space = resolved.space
    return [callbacks.MlflowTrialCallback(tracking_uri, space.name,
                                          record.parent_run_id, resolved),
            progress.SearchProgress(space.name, space.metric, space.mode,
                                    trial_count)]

  def trial_names(self) -> dict[str, Any]:
    """Tune's trial naming: Ray's default (ids and parameters)."""
    return {}

  def before_fit(self) -> None:
    """In the driver, before Tune stages anything."""

  def trial_run(self, resolved: resolved_lib.ResolvedSearch,
                params: dict[str, Any]) -> trial_config.TrialConfig:
    """What a trial trains: a simulation of the reference run."""
    return trial_record.build(resolved, params).config

  def on_worker(self, params: dict[str, Any]) -> None:
    """In a trial's worker, before it trains."""

  def stops(self) -> ContextManager[None]:
    """Around Tune's fit: how a signal stops the search."""
    return contextlib.nullcontext()

  def finish(self, resolved: resolved_lib.ResolvedSearch, results,
             record: tracking.SearchRecord, directory: pathlib.Path,
             state: dict[str, Any], resumed: bool) -> Finished:
    """The leaderboard and winner, written for `promote`; the parent run
    ends with them and the search's pictures."""
    space = resolved.space
    trials = results_lib.trial_records(results, resolved)
    leaderboard = results_lib.leaderboard(trials, space, record)
    if resumed:
      record.delete_unknown_trials({row["trial_id"] for row in leaderboard})
    best = results_lib.best_trial(leaderboard, trials, resolved, record)
    if best:
      (directory / search_files.BEST_FILE).write_text(
          json.dumps(best, indent=2))
    (directory / search_files.LEADERBOARD_FILE).write_text(
        json.dumps(leaderboard, indent=2))
    record.end_parent(
        failed=all(row["status"] == "failed" for row in leaderboard),
        artifacts={search_files.LEADERBOARD_FILE: leaderboard,
                   search_files.BEST_FILE: best},
        pictures=results_lib.draw(space, directory, leaderboard, record),
    )
    return Finished(leaderboard, best)


class PublicDataSearch(SimulatedSearch):
  """Trials simulate the reference run on declared public data."""

  name = tuning.PUBLIC_DATA
  note = ("trials are simulations on public data; the promoted run's eps is"
          " the end-to-end eps")

  def check_data(self, space, data) -> None:
    """Other examples than the private data's, enough for every batch."""
    tuning_mode.check_public_dataset(
        space, data, datasets.load_dataset(space.public_dataset))


class PrivateRandomSearch(SimulatedSearch):
  """Every trial a private run; the whole search accounted and released."""

  name = tuning.PRIVATE_RANDOM_SEARCH
  note = private_search.RELEASE_NOTE
  secret = True
  select_on_test_warning = private_search.SELECT_ON_TEST_WARNING

  def check_options(self, num_samples, register) -> None:
    if num_samples:
      raise ConfigError("--num-samples", num_samples,
                        "unset in a private random search: its number of"
                        " trials is drawn secretly from trial_count")

  def check_resume(self, state, directory) -> None:
    """A released search resumes nowhere; an unreleased one only in its
    own place (`custody.py`)."""
    if "released" in state:
      raise FileExistsError(f"the private search in {directory} has ended"
                            " and released its result: nothing to resume")
    ledger = ledger_lib.Ledger(state["tracking_uri"])
    charged = private_search.search_charge(state["parent_run_id"])
    custody.require_unfinished(ledger, charged, directory, STORAGE_FIELD)
    custody.take(ledger, charged, directory, STORAGE_FIELD)

  def held(self, directory) -> ContextManager[None]:
    return custody.held(directory, STORAGE_FIELD)

  def protect(self, directory) -> None:
    directory.chmod(0o700)  # Its trials' checkpoints and K are secrets.

  def check_room(self, ledger, resolved, examples, new_ledger) -> None:
    charge.check_room(
        ledger,
        private_search.search_entry(resolved, examples, "not yet started"),
        new_ledger)

  def parent_fields(self, resolved, data):
    return private_search.parent_fields(resolved, data), {
        "search_epsilon": resolved.search_epsilon.epsilon}

  def start(self, ledger, resolved, examples, record, new_ledger,
            register, directory) -> dict[str, Any]:
    """Charges the search, registers its release-to-be if asked (the
    registry dates a version itself: made now, it tells only the start),
    then draws K secretly (kept in the owner-only search state until the
    release)."""
    private_search.charge_or_fail(ledger, resolved, examples, record,
                                  new_ledger)
    custody.take(ledger, private_search.search_charge(record.parent_run_id),
                 directory, STORAGE_FIELD)
    registered = ([register, private_search.register(record, register)]
                  if register else None)
    return {"registered": registered,
            "trial_count": private_search.draw_trial_count(resolved.space)}

  def seal(self, ledger, state) -> checkpoint_file.Seal:
    return custody.seal(
        ledger, private_search.search_charge(state["parent_run_id"]), None)

  def trial_count(self, state, space, num_samples) -> int:
    return state["trial_count"]

  def search_algorithm(self, space) -> optuna.samplers.BaseSampler:
    # Hyper-parameters drawn independently, from a seed no one knows.
    return optuna.samplers.RandomSampler(seed=private_search.secret_seed())

  def study_copy(self, directory) -> str | None:
    return None  # The study lists every trial.

  def callbacks(self, resolved, tracking_uri, record, trial_count):
    # No MLflow run per trial; Ray's copy of their results is deleted.
    return [private_search.RayStaging(),
            progress.SecretSearchProgress(resolved.space.name)]

  def trial_names(self) -> dict[str, Any]:
    # Ray's default names count the trials and list their parameters.
    return {"trial_name_creator": private_search.opaque_name,
            "trial_dirname_creator": private_search.opaque_name}

  def before_fit(self) -> None:
    private_search.hide_ray_staging()

  def trial_run(self, resolved, params):
    """Each trial is a private run at the reference triplet itself (the
    file's one simulation batch size is B_ref)."""
    return trial_record.build(resolved, params).reference_run

  def on_worker(self, params) -> None:
    boundary.worker_setup()  # This node's copy of Ray's trial folders.
    private_search.hide_ray_staging()

  def stops(self) -> ContextManager[None]:
    return private_search.sigterm_stops(True)

  def finish(self, resolved, results, record, directory, state,
             resumed) -> Finished:
    """Releases the best trial only when all K trials ended; else keeps the
    state for `--resume` and releases nothing."""
    if not private_search.all_ended(results, state.get("trial_count", 0)):
      return Finished([], None, stopped=True)
    custody.finish(ledger_lib.Ledger(state["tracking_uri"]),
                   private_search.search_charge(state["parent_run_id"]),
                   directory, STORAGE_FIELD)
    released = private_search.finish(resolved, results, record, directory,
                                     search_files.BEST_FILE,
                                     state.get("registered"))
    state.pop("trial_count", None)  # Secret, and of no use once released.
    state["released"] = released is not None
    (directory / search_files.STATE_FILE).write_text(
        json.dumps(state, indent=2))
    if released:
      (directory / search_files.BEST_FILE).write_text(
          json.dumps(released, indent=2))
    return Finished([], released)


MODES = {mode.name: mode for mode in (SimulatedSearch(), PublicDataSearch(),
                                      PrivateRandomSearch())}


def for_space(space: space_lib.SearchSpace) -> SimulatedSearch:
  """The mode of a search file's `tuning_privacy`."""
  return MODES[space.tuning_privacy]
