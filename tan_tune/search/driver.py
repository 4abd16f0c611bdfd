"""The search driver: Ray Tune trials at the TAN-equivalent small batch.

Optuna (TPE, seeded) proposes each trial's hyper-parameters through a
define-by-run space built from the search file (`space.py`, `trials.py`).
Every trial runs `trial.run_trial` at the simulated triplet
(B, sigma_ref B / B_ref, S), so the whole search costs about B_ref / B times
less than searching at B_ref.
MLflow gets a parent run for the search and one child run per trial
(`tracking.py`); at its end the search writes the leaderboard and
`best.json` (the winner), which `tan-tune promote` reads: the winner is the
trial it promotes unless `--trial` names another of the leaderboard.

How the search itself is accounted is its mode's business (`modes.py`): by
default (TAN paper, section 5.2) it is not charged to the privacy budget, its
trials are simulations, not private, and say so, and only the promoted
reference run is accounted. The driver runs every mode the same way.

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

import ray
from ray import tune
import torch

from tan_tune import mlflow_store
from tan_tune.ledger import ledger as ledger_lib
from tan_tune.privacy import report as privacy_report
from tan_tune.registry import privacy_card
from tan_tune.release import boundary
from tan_tune.release import release
from tan_tune.search import callbacks
from tan_tune.search import modes
from tan_tune.search import resolved as resolved_lib
from tan_tune.search import schedulers
from tan_tune.search import search_files
from tan_tune.search import space as search_space_lib
from tan_tune.search import strategy
from tan_tune.search import tracking
from tan_tune.search import trials
from tan_tune.training import checkpoint_file
from tan_tune.training import clipping
from tan_tune.training import datasets
from tan_tune.training import fixed_features
from tan_tune.training import models
from tan_tune.training import private_score
from tan_tune.training import trial as trial_lib
from tan_tune.training import trial_config


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
      that has none (`charge.require_known_dataset`).
    verbose: Ray Tune's verbosity (0 silent, 1 status tables).
    register: a private random search's released model becomes a version
      of this registered model (alias `candidate` once released).
  """

  storage: pathlib.Path = pathlib.Path("runs")
  tracking_uri: str = mlflow_store.DEFAULT_TRACKING_URI
  address: str | None = None
  num_samples: int | None = None
  max_concurrent: int | None = None
  resume: bool = False
  verbose: int = 1
  new_ledger: bool = False
  register: str | None = None


@dataclasses.dataclass(frozen=True)
class SearchResult:
  """What a search produced; `stopped`: a private search interrupted
  before all its trials ended, which released nothing and resumes;
  `registered`: the registered model and version of its release."""

  directory: pathlib.Path
  metric: str
  leaderboard: list[dict[str, Any]]
  best: dict[str, Any] | None
  parent_run_id: str
  tracking_uri: str
  experiment_id: str
  stopped: bool = False
  registered: tuple[str, str] | None = None


def run_search(space_path: pathlib.Path, options: SearchOptions,
               space: search_space_lib.SearchSpace | None = None,
               out: release.Release | None = None) -> SearchResult:
  """Runs (or resumes) the search of a space file to completion.

  A new search resolves the file against its data once (`resolved.py`) and
  saves the result; a resumed one reads that back, so it goes on as it
  started whatever became of the file or the data. `space` is the file
  already loaded, when the caller has it (it is read once). A private
  search publishes through `out` (`release/release.py`), which its
  caller seals (or, when None, a release of its own, sealed here).

  Raises:
    ConfigError: the space file is invalid, does not fit its dataset, or a
      private search finds no room in the dataset's ledger.
    FileNotFoundError: `resume` with no search to resume.
    FileExistsError: a new search where one already is.
  """
  space_path = pathlib.Path(space_path)
  space = space or search_space_lib.load_search_space(space_path)
  directory = (options.storage / space.name).resolve()
  search_files.check_directory(directory, options.resume)
  if options.resume:
    search_files.warn_if_changed(directory, space_path)
    resolved = resolved_lib.load(directory)
    space = resolved.space
  mode = modes.for_space(space)
  examples = data = None
  if not options.resume:
    data = datasets.load_dataset(space.dataset)
    # Every example read once, before any trial: a factory's example of the
    # wrong shape or label is refused here. A private search's charge keys
    # its dataset by them (`ledger.Ledger.identity`), in memory only.
    examples = datasets.examples(data)
    mode.check_data(space, data)
    for family in space.augmentation_families():
      datasets.check_augmentation(data, family)
    # A private search is charged before its trials build the model, so
    # any model of one is checked here first.
    if mode.secret or space.model.factory is not None or not data.is_image:
      _check_own_model(space, data)
    resolved = resolved_lib.resolve(space, data.num_train)
  if space.select_on == "test":
    print(f"[tan-tune] warning: {mode.select_on_test_warning}",
          file=sys.stderr, flush=True)
  mode.check_options(options.num_samples, options.register)

  # Before anything is written: a wrong address leaves no half-made search,
  # a private search without room in its ledger no charge.
  ledger = ledger_lib.Ledger(options.tracking_uri)
  if not options.resume:
    mode.check_room(ledger, resolved, examples, options.new_ledger)
  key = boundary.run_key("search", directory)
  own = mode.secret and out is None  # Called directly: it seals its own.
  if own:
    out = release.Release()
  try:
    with boundary.private_run(key, options.address,
                              secret=mode.secret), mode.held(directory):
      return _run(resolved, mode, space_path, options, directory, ledger,
                  key, out, examples, data)
  finally:
    if own:
      out.seal()


def _check_own_model(space: search_space_lib.SearchSpace,
                     data: datasets.Dataset) -> None:
  """A factory's model, a built-in one on your own records, or a private
  search's, fails here, once, not in every trial: its import, call, shapes,
  DP compatibility and clipping; a fall-back to per-example gradients is
  said once."""
  model = models.build_model(space.model, data.input_shape, data.num_classes)
  # Raises for an engine that does not cover the model, naming the layers.
  uncovered = clipping.fallback(space.clipping, model,
                                space.projection_choices[0])
  if uncovered:
    print(f"[tan-tune] {space.model.source[1]}: fast clipping does not cover"
          f" {', '.join(uncovered[:3])}; trials clip per-example gradients"
          " (vmap) instead: slower, the same clipping", file=sys.stderr,
          flush=True)


def _run(resolved: resolved_lib.ResolvedSearch, mode: strategy.TuningStrategy,
         space_path: pathlib.Path, options: SearchOptions,
         directory: pathlib.Path, ledger: ledger_lib.Ledger,
         key: str, out: release.Release | None,
         examples: datasets.Examples | None,
         data: datasets.Dataset | None) -> SearchResult:
  """The search, inside its boundary (`boundary.py`); `examples` and `data`
  are None when it resumes."""
  space = resolved.space
  state_path = directory / search_files.STATE_FILE
  if out:
    out.covers(directory, options.tracking_uri)
    out.warn_if_stat_able()
  record = tracking.SearchRecord(options.tracking_uri, space.name,
                                 space.tuning_privacy, out)
  if options.resume:
    state = json.loads(state_path.read_text())
    mode.check_resume(state, directory)
    record.resume_parent(state["parent_run_id"])
  else:
    directory.mkdir(parents=True, exist_ok=True)
    mode.protect(directory)
    shutil.copyfile(space_path, directory / search_files.SPACE_FILE)
    saved = resolved_lib.save(resolved, directory)
    _start_parent_run(record, resolved, mode, data,
                      [directory / search_files.SPACE_FILE, saved])
    state = {
        "parent_run_id": record.parent_run_id,
        "experiment_id": record.experiment_id,
        # Absolute, so promote finds it from any working directory.
        "tracking_uri": mlflow_store.absolute_uri(options.tracking_uri),
        **mode.start(ledger, resolved, examples, record, options.new_ledger,
                     options.register, directory),
    }
    state_path.write_text(json.dumps(state, indent=2))

  results = []
  mode.before_fit()
  trial_count = mode.trial_count(state, space, options.num_samples)
  if trial_count > 0:  # A private search may draw K = 0.
    # Computed once here and read by every trial from Ray's object store,
    # inside the boundary: features of the trials' data are that data.
    shared = fixed_features.for_networks(
        space.trial_dataset, space.networks(),
        space.augmentation_families(), torch.device("cpu"))
    trainable = tune.with_resources(
        tune.with_parameters(train_trial, resolved=resolved, mode=mode,
                             key=key, shared_features=shared,
                             seal=mode.seal(ledger, state)),
        callbacks.TrialResources(space.resources),
    )
    del shared  # The object store holds them now.
    tuner = (tune.Tuner.restore(str(directory / "tune"), trainable,
                                resume_errored=True) if options.resume
             else _new_tuner(resolved, mode, options, directory, trainable,
                             record, trial_count))
    with mode.stops():
      results = tuner.fit()
  finished = mode.finish(resolved, results, record, directory, state,
                         options.resume)
  return SearchResult(
      directory, space.metric, finished.leaderboard, finished.best,
      record.parent_run_id, mlflow_store.absolute_uri(options.tracking_uri),
      record.experiment_id, stopped=finished.stopped,
      registered=tuple(state["registered"]) if state.get("registered")
      else None)


def train_trial(
    config: dict[str, Any],
    resolved: resolved_lib.ResolvedSearch,
    mode: strategy.TuningStrategy,
    key: str,
    shared_features: dict[str, fixed_features.Features],
    seal: checkpoint_file.Seal | None = None,
) -> None:
  """Ray Tune's trainable: one trial at the simulated triplet.

  `config` holds Optuna's suggestions; `mode` the search's strategy, handed
  over as an object (a worker need not have registered it). Runs on a
  worker: resumes from Ray's checkpoint when there is one, and reports
  every evaluation with a checkpoint; a network with a fixed front end
  trains on the features the driver computed once. A private search's trial
  seals its checkpoints with its part of the search's `seal`, handed over
  in memory, and a scored trial its validation split's key.
  """
  space = resolved.space
  run = mode.trial_run(resolved, config)
  gpu = space.resources.gpu_for(config[trials.SIMULATION_BATCH_SIZE])
  if torch.cuda.is_available() and 0 < gpu < 1:
    # Ray packs fractional trials on one GPU but does not limit their memory.
    torch.cuda.set_per_process_memory_fraction(gpu)
  mode.on_worker(config)
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
    trial_lib.run_trial(
        run, report=report, checkpoint_dir=local,
        shared_features=shared_features,
        seal=seal and seal.part(tune.get_context().get_trial_id(),
                                trial_config.charged(run)),
        # One split for the whole search, keyed by its secret seal.
        split_key=seal.derive(private_score.SPLIT_KEY) if run.score else None)
  finally:
    shutil.rmtree(local, ignore_errors=True)


def _start_parent_run(
    record: tracking.SearchRecord,
    resolved: resolved_lib.ResolvedSearch,
    mode: strategy.TuningStrategy,
    data: datasets.Dataset,
    artifacts: list[pathlib.Path],
) -> None:
  space = resolved.space
  report = privacy_report.privacy_report(
      resolved.reference, resolved.delta, scheme=resolved.scheme)
  params, metrics = mode.parent_fields(resolved, data)
  record.start_parent(
      run_name=f"search-{space.name}",
      params={
          # C and the clipping engine: a private search's card reads them.
          "reference": {**report.as_dict(),
                        "clip_norm": space.reference.clip_norm,
                        "clipping": space.clipping},
          "tuning_privacy": space.tuning_privacy,
          "default_accountant": resolved.scheme.default_accountant,
          "metric": space.metric,
          "select_on": space.select_on,
          "validation_fraction": (space.validation_fraction
                                  if space.select_on == "validation" else 0),
          "score_noise": space.score_noise,
          **params,
      },
      metrics={
          "reference_eps_tan": report.eps_tan,
          **{f"reference_epsilon_{name}": eps.epsilon
             for name, eps in report.epsilons.items()},
          **metrics,
      },
      tags={
          "tan_tune.search_space": space.name,
          "tan_tune.note": mode.note,
          **privacy_card.code_tags(),
      },
      artifacts=artifacts,
  )


def _new_tuner(resolved, mode, options, directory, trainable, record,
               trial_count: int):
  """A Tuner for a new search of `trial_count` trials, as its mode says."""
  space = resolved.space
  searcher = callbacks.PrunedAwareOptunaSearch(
      space=callbacks.DefineByRun(space),
      metric=mode.ranked_by(space),
      mode=space.mode,
      sampler=mode.search_algorithm(space),
      study_name=space.name,
      study_copy=mode.study_copy(directory),
  )
  scheduler = schedulers.named(space.scheduler).build(
      max(space.steps_grid or (space.reference.steps,)), space.eval_every)
  return tune.Tuner(
      trainable,
      tune_config=tune.TuneConfig(
          search_alg=searcher,
          scheduler=scheduler,
          metric=mode.ranked_by(space),
          mode=space.mode,
          num_samples=trial_count,
          max_concurrent_trials=options.max_concurrent or space.max_concurrent,
          # A trial's worker process (its imports, its data) serves the next
          # trial with the same resources instead of a fresh one.
          reuse_actors=True,
          **mode.trial_names(),
      ),
      run_config=tune.RunConfig(
          name="tune",
          storage_path=str(directory),
          failure_config=tune.FailureConfig(max_failures=2),
          # Two: Ray forces an experiment snapshot every num_to_keep
          # checkpoints of a trial (resume safety), so one would snapshot
          # at every evaluation.
          checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
          callbacks=mode.callbacks(resolved, options.tracking_uri, record,
                                   trial_count),
          verbose=options.verbose,
      ),
  )
