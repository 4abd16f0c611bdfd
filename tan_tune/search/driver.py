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
import math
import pathlib
import shutil
import sys
import tempfile
from typing import Any

import optuna
import ray
from ray import tune
from ray.tune.schedulers import ASHAScheduler
import torch

from tan_tune import config_io
from tan_tune.privacy import report as privacy_report
from tan_tune.search import callbacks
from tan_tune.search import plots
from tan_tune.search import progress
from tan_tune.search import ray_cluster
from tan_tune.search import space as search_space_lib
from tan_tune.search import tracking
from tan_tune.search import trials
from tan_tune.training import datasets
from tan_tune.training import trial as trial_lib

STATE_FILE = "tan_tune_search.json"
BEST_FILE = "best.json"
LEADERBOARD_FILE = "leaderboard.json"
SPACE_FILE = "search_space.yaml"
# Optuna's study, kept for the plots and for `optuna-dashboard`.
STUDY_FILE = "optuna.db"


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
    verbose: Ray Tune's verbosity (0 silent, 1 status tables).
  """

  storage: pathlib.Path = pathlib.Path("runs")
  tracking_uri: str = tracking.DEFAULT_TRACKING_URI
  address: str | None = None
  num_samples: int | None = None
  max_concurrent: int | None = None
  resume: bool = False
  verbose: int = 1


@dataclasses.dataclass(frozen=True)
class SearchResult:
  """What a finished search produced."""

  directory: pathlib.Path
  metric: str
  leaderboard: list[dict[str, Any]]
  best: dict[str, Any] | None
  parent_run_id: str
  tracking_uri: str
  experiment_id: str


def run_search(space_path: pathlib.Path, options: SearchOptions) -> SearchResult:
  """Runs (or resumes) the search of a space file to completion.

  Raises:
    ConfigError: the space file is invalid, or does not fit its dataset.
    FileNotFoundError: `resume` with no search to resume.
  """
  space_path = pathlib.Path(space_path)
  space = search_space_lib.load_search_space(space_path)
  dataset_size = datasets.load_dataset(space.dataset).num_train
  search_space_lib.check_against_dataset(space, dataset_size)
  if space.select_on == "test":
    print(f"[tan-tune] warning: {search_space_lib.SELECT_ON_TEST_WARNING}",
          file=sys.stderr, flush=True)
  directory = (options.storage / space.name).resolve()
  state_path = directory / STATE_FILE
  if options.resume and not state_path.exists():
    raise FileNotFoundError(
        f"no search to resume in {directory} (no {STATE_FILE}); run without"
        " --resume to start one"
    )
  if not options.resume and state_path.exists():
    raise FileExistsError(
        f"{directory} already holds a search: resume it with --resume, or"
        " choose another --storage"
    )

  # Before anything is written: a wrong address leaves no half-made search.
  ray_cluster.connect(options.address)
  record = tracking.SearchRecord(options.tracking_uri, space.name)
  if options.resume:
    state = json.loads(state_path.read_text())
    record.resume_parent(state["parent_run_id"])
    space_path = directory / SPACE_FILE
  else:
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(space_path, directory / SPACE_FILE)
    _start_parent_run(record, space, dataset_size, directory / SPACE_FILE)
    state = {
        "parent_run_id": record.parent_run_id,
        "experiment_id": record.experiment_id,
        # Absolute, so promote finds it from any working directory.
        "tracking_uri": tracking.absolute_uri(options.tracking_uri),
        "dataset_size": dataset_size,
    }
    state_path.write_text(json.dumps(state, indent=2))

  trainable = tune.with_resources(
      tune.with_parameters(
          train_trial, space=space, dataset_size=dataset_size
      ),
      callbacks.TrialResources(space.resources),
  )
  if options.resume:
    tuner = tune.Tuner.restore(
        str(directory / "tune"), trainable, resume_errored=True
    )
  else:
    tuner = _new_tuner(space, options, dataset_size, directory, trainable,
                       record)
  results = tuner.fit()

  leaderboard = _leaderboard(results, space, record)
  if options.resume:
    record.delete_unknown_trials({row["trial_id"] for row in leaderboard})
  best = _best(leaderboard, space, dataset_size, record)
  if best:
    (directory / BEST_FILE).write_text(json.dumps(best, indent=2))
  (directory / LEADERBOARD_FILE).write_text(json.dumps(leaderboard, indent=2))
  all_failed = all(row["status"] == "failed" for row in leaderboard)
  record.end_parent(
      failed=all_failed,
      artifacts={LEADERBOARD_FILE: leaderboard, BEST_FILE: best},
      pictures=_draw(space, directory, leaderboard, record),
  )
  return SearchResult(
      directory, space.metric, leaderboard, best, record.parent_run_id,
      tracking.absolute_uri(options.tracking_uri), record.experiment_id)


def train_trial(
    config: dict[str, Any],
    space: search_space_lib.SearchSpace,
    dataset_size: int,
) -> None:
  """Ray Tune's trainable: one trial at the simulated triplet.

  `config` holds Optuna's suggestions. Runs on a worker: resumes from Ray's
  checkpoint when there is one, and reports every evaluation with a
  checkpoint.
  """
  trial_config, _ = trials.trial_config(space, config, dataset_size)
  gpu = space.resources.gpu_for(config[trials.SIMULATION_BATCH_SIZE])
  if torch.cuda.is_available() and 0 < gpu < 1:
    # Ray packs fractional trials on one GPU but does not limit their memory.
    torch.cuda.set_per_process_memory_fraction(gpu)
  local = pathlib.Path(tempfile.mkdtemp(prefix="tan_tune_trial_"))
  checkpoint = tune.get_checkpoint()
  if checkpoint:
    checkpoint.to_directory(str(local))

  node_id = ray.get_runtime_context().get_node_id()

  def report(metrics: dict[str, Any], directory: pathlib.Path | None) -> None:
    # node_id: where it ran, for the leaderboard and multi-node checks.
    metrics = dict(metrics, steps_total=trial_config.privacy.steps,
                   node_id=node_id)
    tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(str(directory)))

  try:
    trial_lib.run_trial(trial_config, report=report, checkpoint_dir=local)
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
  record.start_parent(
      run_name=f"search-{space.name}",
      params={
          "reference": report.as_dict(),
          "simulation_batch_sizes": list(space.simulation_batch_sizes),
          "compute_saving": [
              space.reference.batch_size / b for b in space.simulation_batch_sizes
          ],
          "default_accountant": scheme.default_accountant,
          "num_trials": space.num_trials,
          "metric": space.metric,
          "select_on": space.select_on,
          "validation_fraction": (space.validation_fraction
                                  if space.select_on == "validation" else 0),
      },
      metrics=metrics,
      tags={
          "tan_tune.search_space": space.name,
          "tan_tune.note": (
              "trials are simulations, not private; the search is not charged"
              " to the privacy budget; only the promoted run is accounted"
          ),
      },
      artifacts=[space_file],
  )


def study_storage(directory: pathlib.Path) -> str:
  """The search's Optuna study: `optuna-dashboard <this>` opens it."""
  return f"sqlite:///{directory / STUDY_FILE}"


def _draw(space, directory, leaderboard, record) -> list[pathlib.Path]:
  """The search's pictures (`plots.py`), from its study and trial runs."""
  study = optuna.load_study(study_name=space.name,
                            storage=study_storage(directory))
  curves = {
      row["trial_id"]: [(m.step, m.value) for m in record.client
                        .get_metric_history(row["mlflow_run_id"], space.metric)]
      for row in leaderboard}
  return plots.draw_search(study, curves, space.metric, directory / "plots")


def _new_tuner(space, options, dataset_size, directory, trainable, record):
  searcher = callbacks.PrunedAwareOptunaSearch(
      space=callbacks.DefineByRun(space),
      metric=space.metric,
      mode=space.mode,
      sampler=optuna.samplers.TPESampler(
          seed=space.seed, multivariate=True, group=True
      ),
      study_name=space.name,
      study_copy=study_storage(directory),
  )
  scheduler = None
  if space.scheduler == "asha":
    longest = max(space.steps_grid or (space.reference.steps,))
    scheduler = ASHAScheduler(
        time_attr="step", max_t=longest, grace_period=space.eval_every,
        reduction_factor=3,
    )
  return tune.Tuner(
      trainable,
      tune_config=tune.TuneConfig(
          search_alg=searcher,
          scheduler=scheduler,
          metric=space.metric,
          mode=space.mode,
          num_samples=options.num_samples or space.num_trials,
          max_concurrent_trials=options.max_concurrent or space.max_concurrent,
          # A trial's worker process (its imports, its data) serves the next
          # trial with the same resources instead of a fresh one.
          reuse_actors=True,
      ),
      run_config=tune.RunConfig(
          name="tune",
          storage_path=str(directory),
          failure_config=tune.FailureConfig(max_failures=2),
          # Two: Ray forces an experiment snapshot every num_to_keep
          # checkpoints of a trial (resume safety), so one would snapshot
          # at every evaluation.
          checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
          callbacks=[callbacks.MlflowTrialCallback(
              options.tracking_uri, space.name, record.parent_run_id, space,
              dataset_size,
          ), progress.SearchProgress(  # Shows only in a live console.
              space.name, space.metric, space.mode,
              options.num_samples or space.num_trials)],
          verbose=options.verbose,
      ),
  )


def _leaderboard(results, space, record) -> list[dict[str, Any]]:
  """Every trial of the search, best first; finished before pruned or failed."""
  rows = []
  for trial in tune.ExperimentAnalysis(results.experiment_path).trials:
    last = trial.last_result or {}
    if trial.status == "ERROR":
      status = "failed"
    elif progress.stopped_early(last):
      status = "pruned"
    else:
      status = "finished"
    rows.append({
        "trial_id": trial.trial_id,
        "status": status,
        space.metric: last.get(space.metric),
        "step": last.get("step"),
        # Promote estimates the reference run's wall time from it.
        "examples_per_second": last.get("examples_per_second"),
        "node_id": last.get("node_id"),
        "params": dict(trial.config),
        "mlflow_run_id": record.trial_run(trial.trial_id,
                                          dict(trial.config))[0],
    })
  sign = -1 if space.mode == "max" else 1
  rows.sort(key=lambda row: (
      row["status"] != "finished",
      math.inf if row[space.metric] is None else sign * row[space.metric],
  ))
  return rows


def _best(leaderboard, space, dataset_size, record) -> dict[str, Any] | None:
  finished = [row for row in leaderboard if row["status"] == "finished"]
  if not finished:
    return None
  winner = finished[0]
  config, info = trials.trial_config(
      space, winner["params"], dataset_size
  )
  return {
      "search_space": space.name,
      "metric": space.metric,
      "mode": space.mode,
      "value": winner[space.metric],
      "trial_id": winner["trial_id"],
      "params": winner["params"],
      "simulated": info,
      "trial_config": config_io.to_dict(config),
      "reference": {
          **dataclasses.asdict(space.reference),
          "dataset_size": dataset_size,
      },
      "mlflow_run_id": winner["mlflow_run_id"],
      "mlflow_parent_run_id": record.parent_run_id,
      "tracking_uri": record.tracking_uri,
      "note": "a simulated trial: not private; promote runs the reference",
  }
