"""The search driver: Ray Tune trials at the TAN-equivalent small batch.

Optuna (TPE, seeded) proposes each trial's hyper-parameters through a
define-by-run space built from the search file (`space.py`, `trials.py`).
Every trial runs `trial.run_trial` at the simulated triplet
(B, sigma_ref B / B_ref, S), so the whole search costs about B_ref / B times
less than searching at B_ref.
MLflow gets a parent run for the search and one child run per trial
(`tracking.py`); the driver writes a leaderboard and `best.json`, the input of
`tan-tune promote`.

The search is not charged to the privacy budget (TAN paper, section 5.2): its
trials are simulations, not private, and say so; only the promoted reference
run is accounted.

A search directory (`<storage>/<name>`) holds Ray Tune's state, so a driver
killed at any point is resumed by `run_search(..., resume=True)`: Ray restores
the trials and the Optuna searcher, and the MLflow runs are found again by
their trial ids.
"""

import dataclasses
import json
import pathlib
import shutil
import sys
from typing import Any

import optuna
import ray
from ray import tune
from ray.tune.schedulers import ASHAScheduler
import torch

from tan_tune import secret_capture
from tan_tune.errors import ConfigError
from tan_tune.privacy import report as privacy_report
from tan_tune.privacy import tuning
from tan_tune.search import boundary
from tan_tune.search import callbacks
from tan_tune.search import ledger as ledger_lib
from tan_tune.search import private_search
from tan_tune.search import progress
from tan_tune.search import space as search_space_lib
from tan_tune.search import tracking
from tan_tune.search import results as results_lib
from tan_tune.search import search_files
from tan_tune.search import trials
from tan_tune.search import tuning_mode
from tan_tune.training import datasets
from tan_tune.training import trial as trial_lib

# What each way of tuning means for the eps of what is released.
_NOTES = {
    tuning.NON_PRIVATE: "trials are simulations, not private; the search is"
                        " not accounted; only the promoted run is",
    tuning.PUBLIC_DATA: "trials are simulations on public data; the promoted"
                        " run's eps is the end-to-end eps",
    tuning.PRIVATE_RANDOM_SEARCH: private_search.RELEASE_NOTE,
}


@dataclasses.dataclass(frozen=True)
class SearchOptions:
  """How to run a search, as opposed to what to search (the space).

  Attributes:
    storage: the folder holding search directories; one per space name.
    tracking_uri: MLflow's; the default is sqlite in the working directory.
    address: an existing Ray cluster; None starts an embedded local Ray.
    num_samples: overrides the space's num_trials.
    max_concurrent: overrides the space's max_concurrent.
    resume: continue the search in `storage` instead of starting anew.
    new_ledger: a private search may start its dataset's ledger in a store
      that has none (`boundary.require_known_dataset`).
    verbose: Ray Tune's verbosity (0 silent, 1 status tables).
  """

  storage: pathlib.Path = pathlib.Path("runs")
  tracking_uri: str = tracking.DEFAULT_TRACKING_URI
  address: str | None = None
  num_samples: int | None = None
  max_concurrent: int | None = None
  resume: bool = False
  verbose: int = 1
  new_ledger: bool = False


@dataclasses.dataclass(frozen=True)
class SearchResult:
  """What a search produced; `stopped`: a private search interrupted
  before all its trials ended, which released nothing and resumes."""

  directory: pathlib.Path
  metric: str
  leaderboard: list[dict[str, Any]]
  best: dict[str, Any] | None
  parent_run_id: str
  tracking_uri: str
  experiment_id: str
  stopped: bool = False


def run_search(space_path: pathlib.Path, options: SearchOptions) -> SearchResult:
  """Runs (or resumes) the search of a space file to completion.

  Raises:
    ConfigError: the space file is invalid, does not fit its dataset, or a
      private search finds no room in the dataset's ledger.
    FileNotFoundError: `resume` with no search to resume.
  """
  space_path = pathlib.Path(space_path)
  space = search_space_lib.load_search_space(space_path)
  directory = (options.storage / space.name).resolve()
  search_files.check_directory(directory, options.resume)
  if options.resume:  # The search goes on as it started, whatever the edits.
    space_path = search_files.saved_space(directory, space_path)
    space = search_space_lib.load_search_space(space_path)
  data = datasets.load_dataset(space.dataset)
  dataset_size = data.num_train
  search_space_lib.check_against_dataset(space, dataset_size)
  if space.public_dataset:
    tuning_mode.check_public_dataset(
        space, data, datasets.load_dataset(space.public_dataset))
  if space.select_on == "test":
    warning = (private_search.SELECT_ON_TEST_WARNING if space.private_trials
               else search_space_lib.SELECT_ON_TEST_WARNING)
    print(f"[tan-tune] warning: {warning}", file=sys.stderr, flush=True)
  if space.private_trials and options.num_samples:
    raise ConfigError("--num-samples", options.num_samples,
                      "unset in a private random search: its number of"
                      " trials is drawn secretly from trial_count")

  # Before anything is written: a wrong address leaves no half-made search,
  # a private search without room in its ledger no charge.
  ledger = ledger_lib.Ledger(options.tracking_uri)
  if space.private_trials and not options.resume:
    boundary.check_room(
        ledger, private_search.search_entry(space, data, "not yet started"),
        options.new_ledger)
  key = boundary.run_key("search", directory)
  with boundary.private_run(key, options.address,
                            owner_only=space.private_trials):
    return _run(space, space_path, data, options, directory, ledger, key)


def _run(space: search_space_lib.SearchSpace, space_path: pathlib.Path,
         data: datasets.Dataset, options: SearchOptions,
         directory: pathlib.Path, ledger: ledger_lib.Ledger,
         key: str) -> SearchResult:
  """The search, inside its boundary (`boundary.py`)."""
  state_path = directory / search_files.STATE_FILE
  dataset_size = data.num_train
  record = tracking.SearchRecord(options.tracking_uri, space.name,
                                 space.tuning_privacy)
  if options.resume:
    state = json.loads(state_path.read_text())
    if "released" in state:
      raise FileExistsError(f"the private search in {directory} has ended"
                            " and released its result: nothing to resume")
    record.resume_parent(state["parent_run_id"])
  else:
    directory.mkdir(parents=True, exist_ok=True)
    if space.private_trials:  # Its trials' checkpoints and K are secrets.
      directory.chmod(0o700)
    shutil.copyfile(space_path, directory / search_files.SPACE_FILE)
    _start_parent_run(record, space, dataset_size,
                      directory / search_files.SPACE_FILE)
    state = {
        "parent_run_id": record.parent_run_id,
        "experiment_id": record.experiment_id,
        # Absolute, so promote finds it from any working directory.
        "tracking_uri": tracking.absolute_uri(options.tracking_uri),
        "dataset_size": dataset_size,
    }
    if space.private_trials:
      private_search.charge_or_fail(ledger, space, data, record,
                                    options.new_ledger)
      state["trial_count"] = private_search.draw_trial_count(space)
    state_path.write_text(json.dumps(state, indent=2))

  trainable = tune.with_resources(
      tune.with_parameters(
          train_trial, space=space, dataset_size=dataset_size, key=key
      ),
      callbacks.TrialResources(space.resources),
  )
  results = []
  if space.private_trials:  # Before Tune stages anything there.
    private_search.hide_ray_staging()
  if state.get("trial_count", 1) > 0:  # A private search may draw K = 0.
    tuner = (tune.Tuner.restore(str(directory / "tune"), trainable,
                                resume_errored=True) if options.resume
             else _new_tuner(space, options, dataset_size, directory,
                             trainable, record, state.get("trial_count")))
    with private_search.sigterm_stops(space.private_trials):
      results = tuner.fit()
  if space.private_trials:
    if not private_search.all_ended(results, state.get("trial_count", 0)):
      return SearchResult(
          directory, space.metric, [], None, record.parent_run_id,
          record.tracking_uri, record.experiment_id, stopped=True)
    released = private_search.finish(space, results, data, record, directory,
                                     search_files.BEST_FILE)
    state.pop("trial_count", None)  # Secret, and of no use once released.
    state["released"] = released is not None
    state_path.write_text(json.dumps(state, indent=2))
    if released:
      (directory / search_files.BEST_FILE).write_text(
          json.dumps(released, indent=2))
    return SearchResult(
        directory, space.metric, [], released, record.parent_run_id,
        record.tracking_uri, record.experiment_id)

  leaderboard = results_lib.leaderboard(results, space, record)
  if options.resume:
    record.delete_unknown_trials({row["trial_id"] for row in leaderboard})
  best = results_lib.best_trial(leaderboard, space, dataset_size, record)
  if best:
    (directory / search_files.BEST_FILE).write_text(json.dumps(best, indent=2))
  (directory / search_files.LEADERBOARD_FILE).write_text(
      json.dumps(leaderboard, indent=2))
  all_failed = all(row["status"] == "failed" for row in leaderboard)
  record.end_parent(
      failed=all_failed,
      artifacts={search_files.LEADERBOARD_FILE: leaderboard,
                 search_files.BEST_FILE: best},
      pictures=results_lib.draw(space, directory, leaderboard, record),
  )
  return SearchResult(
      directory, space.metric, leaderboard, best, record.parent_run_id,
      tracking.absolute_uri(options.tracking_uri), record.experiment_id)


def train_trial(
    config: dict[str, Any],
    space: search_space_lib.SearchSpace,
    dataset_size: int,
    key: str,
) -> None:
  """Ray Tune's trainable: one trial at the simulated triplet.

  `config` holds Optuna's suggestions. Runs on a worker: resumes from Ray's
  checkpoint when there is one, and reports every evaluation with a
  checkpoint.
  """
  run, _ = trials.run_config(space, config, dataset_size)
  gpu = space.resources.gpu_for(config[trials.SIMULATION_BATCH_SIZE])
  if torch.cuda.is_available() and 0 < gpu < 1:
    # Ray packs fractional trials on one GPU but does not limit their memory.
    torch.cuda.set_per_process_memory_fraction(gpu)
  if space.private_trials:  # This node's copy of Ray's trial folders.
    boundary.worker_setup()
    secret_capture.record("trial_params", config)
    private_search.hide_ray_staging()
  local = boundary.worker_folder(key)
  checkpoint = tune.get_checkpoint()
  if checkpoint:
    checkpoint.to_directory(str(local))

  node_id = ray.get_runtime_context().get_node_id()

  def report(metrics: dict[str, Any], directory: pathlib.Path | None) -> None:
    # node_id: where it ran, for the leaderboard and multi-node checks.
    metrics = dict(metrics, steps_total=run.privacy.steps,
                   node_id=node_id)
    tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(str(directory)))

  try:
    trial_lib.run_trial(run, report=report, checkpoint_dir=local)
  finally:
    shutil.rmtree(local, ignore_errors=True)


def _start_parent_run(
    record: tracking.SearchRecord,
    space: search_space_lib.SearchSpace,
    dataset_size: int,
    space_file: pathlib.Path,
) -> None:
  reference = search_space_lib.reference_triplet(space, dataset_size)
  scheme = space.reference_schemes()[0]  # The one that spends the most.
  report = privacy_report.privacy_report(
      reference, space.reference.delta, scheme=scheme)
  metrics = {
      "reference_eps_tan": report.eps_tan,
      **{f"reference_epsilon_{name}": eps.epsilon
         for name, eps in report.epsilons.items()},
  }
  params = {
      "reference": report.as_dict(),
      "tuning_privacy": space.tuning_privacy,
      "default_accountant": scheme.default_accountant,
      "metric": space.metric,
      "select_on": space.select_on,
      "validation_fraction": (space.validation_fraction
                              if space.select_on == "validation" else 0),
  }
  if space.private_trials:
    delta = space.reference.delta or 1 / dataset_size
    search = tuning.search_epsilon(reference, delta, space.trial_count)
    metrics["search_epsilon"] = search.epsilon
    params.update(search_epsilon=search.describe(),
                  trial_count=dataclasses.asdict(space.trial_count))
  else:
    params.update(
        simulation_batch_sizes=list(space.simulation_batch_sizes),
        compute_saving=[space.reference.batch_size / b
                        for b in space.simulation_batch_sizes],
        num_trials=space.num_trials,
        public_dataset=(space.public_dataset.name if space.public_dataset
                        else None))
  record.start_parent(
      run_name=f"search-{space.name}",
      params=params,
      metrics=metrics,
      tags={
          "tan_tune.search_space": space.name,
          "tan_tune.note": _NOTES[space.tuning_privacy],
      },
      artifacts=[space_file],
  )


def _new_tuner(space, options, dataset_size, directory, trainable, record,
               trial_count: int | None):
  """A Tuner for a new search; a private one runs `trial_count` trials drawn
  at random, with no MLflow run and no copy of the study of their own."""
  private = space.private_trials
  sampler = (optuna.samplers.RandomSampler(seed=private_search.secret_seed())
             if private or space.sampler == "random"
             else optuna.samplers.TPESampler(seed=space.seed, multivariate=True,
                                             group=True))
  searcher = callbacks.PrunedAwareOptunaSearch(
      space=callbacks.DefineByRun(space),
      metric=space.metric,
      mode=space.mode,
      sampler=sampler,
      study_name=space.name,
      study_copy=None if private else results_lib.study_storage(directory),
  )
  scheduler = None
  if space.scheduler == "asha":
    longest = max(space.steps_grid or (space.reference.steps,))
    scheduler = ASHAScheduler(
        time_attr="step", max_t=longest, grace_period=space.eval_every,
        reduction_factor=3,
    )
  num_samples = trial_count or options.num_samples or space.num_trials
  watch = (progress.SecretSearchProgress(space.name) if private else
           progress.SearchProgress(space.name, space.metric, space.mode,
                                   num_samples))  # Shows only in a console.
  # A private search's trials get no MLflow run, and Ray's copy of their
  # results is deleted at the end.
  trial_callbacks = [private_search.RayStaging()] if private else [
      callbacks.MlflowTrialCallback(options.tracking_uri, space.name,
                                    record.parent_run_id, space, dataset_size)]
  return tune.Tuner(
      trainable,
      tune_config=tune.TuneConfig(
          search_alg=searcher,
          scheduler=scheduler,
          metric=space.metric,
          mode=space.mode,
          num_samples=num_samples,
          max_concurrent_trials=options.max_concurrent or space.max_concurrent,
          # A trial's worker process (its imports, its data) serves the next
          # trial with the same resources instead of a fresh one.
          reuse_actors=True,
          # Ray's default names count the trials and list their parameters.
          **({"trial_name_creator": private_search.opaque_name,
              "trial_dirname_creator": private_search.opaque_name}
             if private else {}),
      ),
      run_config=tune.RunConfig(
          name="tune",
          storage_path=str(directory),
          failure_config=tune.FailureConfig(max_failures=2),
          # Two: Ray forces an experiment snapshot every num_to_keep
          # checkpoints of a trial (resume safety), so one would snapshot
          # at every evaluation.
          checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
          callbacks=[*trial_callbacks, watch],
          verbose=options.verbose,
      ),
  )
