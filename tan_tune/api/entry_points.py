"""search and promote as Python functions returning typed results.

Each does what its `tan-tune` command does, with the same checks, files and
privacy boundaries (the command is a thin layer that parses arguments and
prints these results): Ray's output goes to a log in the search directory
unless `verbose`, owner-only (a private search's is deleted once it has
released), and the promoted run's log is deleted when it finishes. A private
flow refuses a Ray this process already started whose session folder other
users can reach (`boundary.require_private_ray`).
"""

import contextlib
import dataclasses
import os
import pathlib
import tempfile
from typing import Any, Callable, Iterator, Mapping

import yaml

from tan_tune import console as console_lib
from tan_tune import mlflow_store
from tan_tune import ray_cluster
from tan_tune.api import references
from tan_tune.errors import ConfigError
from tan_tune.ledger import ledger as ledger_lib
from tan_tune.promote import attempts
from tan_tune.promote import plan as plan_lib
from tan_tune.promote import run as run_lib
from tan_tune.promote import search_outcome
# Re-exported as the API's own, so that its reference renders the classes.
from tan_tune.promote.gate import PromotionRefused
from tan_tune.promote.plan import PromotionPlan
from tan_tune.promote.run import PromotionFailed, PromotionResult
from tan_tune.registry import model_registry
from tan_tune.release import boundary
from tan_tune.release import release
from tan_tune.release import release_time
from tan_tune.search import driver
from tan_tune.search import modes
from tan_tune.search import space as space_lib

SEARCH_LOG = "search.log"
"""Ray's output while a search runs (unless `verbose`), in its directory."""
PROMOTE_LOG = "promote.log"
"""Ray's output while a promoted run runs (unless `verbose`), in its
promotion's directory; deleted when the run finishes."""
Space = str | os.PathLike | Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class SearchResult(driver.SearchResult):
  """What a search produced (`driver.SearchResult`).

  Attributes:
    directory: the search directory.
    metric: the metric its trials are ranked by.
    leaderboard: a row per trial, the best first; empty for a private
      random search.
    best: the winner as `BEST_FILE` holds it; None when no trial finished.
    parent_run_id: the search's MLflow parent run.
    tracking_uri: its MLflow store, absolute.
    experiment_id: its MLflow experiment.
    stopped: a private search interrupted before all its trials ended,
      which released nothing and resumes.
    registered: (name, version) of its released model in the Model
      Registry; None unregistered.
    private: a private random search, which released its best trial alone:
      the number of its trials and the others' results are not to be shown.
  """

  private: bool = False


@dataclasses.dataclass(frozen=True)
class Promotion:
  """A promotion's plan and, once it ran, its result.

  Attributes:
    plan: privacy, prediction and time of the run.
    result: the finished run's; None for a plan only.
  """

  plan: plan_lib.PromotionPlan
  result: run_lib.PromotionResult | None


def search(space: Space, *, storage: str | os.PathLike = "runs",
           tracking_uri: str = mlflow_store.DEFAULT_TRACKING_URI,
           address: str | None = None, num_samples: int | None = None,
           max_concurrent: int | None = None, resume: bool = False,
           new_ledger: bool = False, verbose: bool = False,
           announce_log: bool = True,
           register: str | None = None,
           release_at: release_time.ReleaseTime | None = None
           ) -> SearchResult:
  """Runs (or, with `resume`, continues) a hyper-parameter search.

  Args:
    space: a search file's path, or its content as a mapping, where
      `model.factory` and `dataset.factory` may be Python callables
      (`references.py` says which).
    storage: the folder of search directories, `<storage>/<name>`.
    tracking_uri: MLflow's store.
    address: a Ray cluster; None starts an embedded local Ray.
    num_samples: the trials to run; None: the file's.
    max_concurrent: the most trials at once; None: the file's.
    resume: continue the search in `storage` after a crash.
    new_ledger: a private search may start its dataset's ledger here.
    verbose: show Ray's output instead of logging it.
    announce_log: say once where Ray's output goes.
    register: a private random search's released model becomes a new
      version of this registered model, its privacy card as description.
    release_at: a private random search's release time: its last writes
      wait for it, so that the ctimes of its files do not count its trials
      (`release_time.parse`: '+2h', a `timedelta` from its start, or a
      moment).

  Returns:
    The leaderboard, the best trial, the search directory and its MLflow
    parent run; `private` for a private random search.

  Raises:
    ConfigError: an invalid space, or data or a model it cannot use.
    FileExistsError, FileNotFoundError: a new search where one is, or a
      resume where none is.
  """
  storage = pathlib.Path(storage)
  if register is not None and not model_registry.valid_name(register):
    raise ConfigError("register", register, model_registry.NAME_RULE)
  when = None if release_at is None else release_time.parse(release_at)
  with _space_file(space) as path:
    loaded = space_lib.load_search_space(path)  # A bad file fails here.
    private = modes.for_space(loaded).secret
    if when and not private:
      raise ConfigError(release_time.FIELD, str(release_at),
                        "unset: a search of simulated trials releases"
                        " nothing private (promote its winner with it)")
    log = (storage / loaded.name / SEARCH_LOG).resolve()
    if announce_log and not verbose:
      print(f"Ray's output goes to {log}"
            f"{' until the search ends' if private else ''}; verbose shows"
            " it here", flush=True)
    options = driver.SearchOptions(
        storage=storage, tracking_uri=tracking_uri, address=address,
        num_samples=num_samples, max_concurrent=max_concurrent,
        resume=resume, verbose=int(verbose), new_ledger=new_ledger,
        register=register)
    # Every search's log is owner-only; a private search's counts its trials
    # and times them, so it is deleted once the search has released.
    out = release.Release(release_at=when) if private else None
    try:
      with boundary.owner_only_files(), console_lib.quiet_terminal(
          log, verbose):
        result = driver.run_search(path, options, loaded, out)
        ray_cluster.disconnect()
      if private and not result.stopped:
        out.wait()  # Released or not: K = 0 ends early too.
        log.unlink(missing_ok=True)
    finally:
      if out:
        out.seal()  # Last: whatever the search changed, stamped at t_0.
  return SearchResult(**vars(result), private=private)


def promote(search_dir: str | os.PathLike | None = None, *,
            mlflow_run: str | None = None, tracking_uri: str | None = None,
            storage: str | os.PathLike = "runs", trial: str | None = None,
            workers: int = 1, gpus_per_worker: float | None = None,
            max_physical_batch: int | None = None,
            target_epsilon: float | None = None, calibrate: bool = False,
            calibration_seeds: int = 1, new_ledger: bool = False,
            address: str | None = None, plan_only: bool = False,
            on_plan: Callable[[plan_lib.PromotionPlan], None] | None = None,
            verbose: bool = False, announce_log: bool = True,
            register: str | None = None,
            release_at: release_time.ReleaseTime | None = None) -> Promotion:
  """Plans the winner's reference run and, unless `plan_only`, runs it.

  Args:
    search_dir: a search directory; or None with `mlflow_run`.
    mlflow_run: the search's MLflow parent run, whose directory is found
      under `storage`.
    tracking_uri: MLflow's store; by default the search's.
    storage: the folder of search directories, for `mlflow_run`.
    trial: another trial than the winner.
    workers: the run's Ray Train workers.
    gpus_per_worker: the GPUs each worker reserves; None: one when the
      search's trials used GPUs, none otherwise.
    max_physical_batch: the micro-batch size; None: the search's.
    target_epsilon: the budget, by default the search file's.
    calibrate: fit the scaling law on added runs.
    calibration_seeds: with `calibrate`, the runs at each added batch size
      (seeds 0, 1, ...).
    new_ledger: the dataset's first private run in this store.
    address: a Ray cluster; None starts an embedded local Ray.
    plan_only: return the plan without running it (`result` None).
    on_plan: called with the plan before the run starts (the command prints
      it there).
    verbose: show Ray's output instead of logging it.
    announce_log: say once where Ray's output goes.
    register: a registered model's name: the run becomes its newest
      version, alias `candidate` once finished, its privacy card as
      description (`model_registry.py`).
    release_at: the run's release time: its last writes wait for it, so
      that the ctimes of its files do not time it (`release_time.parse`).

  Raises:
    ConfigError: invalid arguments, or data that changed since the search.
    PromotionRefused: the privacy gate or the ledger said no.
    PromotionFailed: training failed (the message names Ray's log).
  """
  if calibration_seeds > 1 and not calibrate:
    raise ConfigError("calibration_seeds", calibration_seeds,
                      "1 without calibrate (the seeds are the calibration"
                      " runs')")
  if register is not None and not model_registry.valid_name(register):
    raise ConfigError("register", register, model_registry.NAME_RULE)
  when = None if release_at is None else release_time.parse(release_at)
  if mlflow_run:
    outcome = search_outcome.load_search_run(
        mlflow_run, tracking_uri or mlflow_store.DEFAULT_TRACKING_URI,
        pathlib.Path(storage))
  else:
    outcome = search_outcome.load_search_directory(pathlib.Path(search_dir),
                                                   tracking_uri)
  plan = plan_lib.plan_promotion(
      outcome, trial_id=trial, workers=workers,
      gpus_per_worker=gpus_per_worker, max_physical_batch=max_physical_batch,
      target=target_epsilon, calibrate=calibrate, new_ledger=new_ledger,
      embedded_ray=address is None, calibration_seeds=calibration_seeds)
  if on_plan:
    on_plan(plan)
  if plan_only:
    return Promotion(plan, None)
  # Before Ray starts: a wrong address or store costs nothing (the run
  # checks again).
  ray_cluster.resolve_and_probe(address)
  attempts.check_store(ledger_lib.Ledger(outcome.tracking_uri),
                       outcome.parent_run_id, plan.ledger_entry,
                       plan.new_ledger)
  log = run_lib.promotion_directory(plan).resolve() / PROMOTE_LOG
  if announce_log and not verbose:
    print(f"Ray's output goes to {log} until the run ends; verbose shows it"
          " here", flush=True)
  out = release.Release(release_at=when)
  try:
    # The log times the run's steps: owner-only, deleted when it finishes.
    with boundary.owner_only_files(), console_lib.quiet_terminal(
        log, verbose):
      result = run_lib.run_promotion(plan, out, address, register)
      ray_cluster.disconnect()
    out.wait()
    log.unlink(missing_ok=True)
  except run_lib.PromotionFailed as failure:
    raise run_lib.PromotionFailed(f"{failure} (Ray's output: {log})") from (
        failure)
  finally:
    out.seal()  # Last: whatever the run changed is stamped at its start.
  return Promotion(plan, result)


@contextlib.contextmanager
def _space_file(space: Space) -> Iterator[pathlib.Path]:
  """A search file's path: as given, or the mapping written to a temporary
  file (the search keeps its own copy)."""
  if not isinstance(space, Mapping):
    yield pathlib.Path(space)
    return
  named = references.with_references(space)
  with tempfile.TemporaryDirectory(prefix="tan-tune-space-") as folder:
    path = pathlib.Path(folder) / f"{named.get('name', 'search')}.yaml"
    path.write_text(yaml.safe_dump(named, sort_keys=False))
    yield path
