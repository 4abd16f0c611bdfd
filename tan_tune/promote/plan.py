"""Planning a promotion: the search's winner at the reference triplet.

A finished search (a directory, or its MLflow parent run) gives the space and
the leaderboard. Promotion takes one trial's non-privacy hyper-parameters to
the triplet the trial simulated: (B_ref, sigma_ref, S), or for a trial that
searched S at constant eta, (B_ref sqrt(S_ref / S), sigma_ref, S) with its lr
scale. The lr itself carries over unchanged: the update divides the noisy sum
by B, so its noise std sigma C / B is the same in the simulation and at B_ref.

`plan_promotion` takes one step per function: the options, the private data,
the privacy gate's report (`gate.py`), the ledger's charge (`ledger/`), the
released model. The accuracy's prediction fits the scaling law to runs not
selected for their score (`calibration.py`). Nothing here starts a run or
writes anything; `run.py` runs the plan.
"""

import dataclasses
import math
import time
from typing import Any

from tan_tune import config_io
from tan_tune.errors import ConfigError
from tan_tune.ledger import composition as composition_lib
from tan_tune.ledger import ledger as ledger_lib
from tan_tune.privacy import report as privacy_report_lib
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.promote import attempts
from tan_tune.promote import calibration
from tan_tune.promote import gate
from tan_tune.promote import scaling_law
from tan_tune.promote import search_outcome
from tan_tune.promote import time_estimate
from tan_tune.registry import served_model
from tan_tune.search import trial_record
from tan_tune.search import trials
from tan_tune.search import tuning_mode
from tan_tune.training import datasets
from tan_tune.training import fixed_features
from tan_tune.training import plugins
from tan_tune.training import splits
from tan_tune.training import trial_config


@dataclasses.dataclass(frozen=True)
class PromotionPlan:
  """What promote will run, what it costs, what it should reach.

  Attributes:
    outcome: the search.
    trial: the promoted trial's leaderboard row.
    config: the reference run.
    record: the trial's record: its simulated and reference triplets, lr
      scale and compute.
    privacy: eps per accountant and eps_TAN of the reference triplet.
    target_epsilon: the budget the gate checked.
    workers: data-parallel workers of the reference run.
    gpus_per_worker: GPUs each worker reserves; 0 trains on CPUs.
    time: the run's wall time, measured piece by piece (`time_estimate.py`),
      or None (GPU workers, none here to time).
    calibration_seconds: the calibration runs' compute at the trial's
      measured throughput (they run in parallel on free workers); None
      without calibration or a recorded throughput.
    scaling_points: (B, metric) of the search's runs not selected for their
      score, which `scaling` fits.
    calibration: params of the runs `--calibrate` adds, one per batch size.
    calibration_seeds: runs at each of those batch sizes, with seeds 0 to
      calibration_seeds - 1 added to the search's: replicates narrow the
      interval, at 7/64 of the reference run's compute each.
    ledger_entry: what the run charges to its dataset's privacy ledger,
      under this attempt's key (`attempts.current`).
    ledger: the dataset's spend before and with this run.
    dataset_in_ledger: the store's ledger has an entry for the dataset
      (else promote charges it only with `new_ledger`).
    new_ledger: `--new-ledger`: the dataset's ledger may start in this store.
    input_shape: (C, H, W) of the dataset's images.
    held_out_size: the examples the run's accuracy is measured on.
    weights_digest: SHA-256 of the model's starting weights file, if any.
    served: the MLflow Model the run will log (`served_model.py`).
    front_end: whether a fixed front end is computed once or at every step,
      and why (`fixed_features.describe`).
  """

  outcome: search_outcome.SearchOutcome
  trial: dict[str, Any]
  config: trial_config.TrialConfig
  record: trial_record.TrialRecord
  privacy: privacy_report_lib.PrivacyReport
  target_epsilon: float
  workers: int
  gpus_per_worker: float
  time: time_estimate.TimeEstimate | None
  calibration_seconds: float | None
  scaling_points: list[tuple[int, float]]
  calibration: list[dict[str, Any]]
  calibration_seeds: int
  ledger_entry: ledger_lib.Entry
  ledger: composition_lib.Composition
  dataset_in_ledger: bool
  new_ledger: bool
  input_shape: tuple[int, ...]
  held_out_size: int
  weights_digest: str | None
  served: served_model.Servable
  front_end: str

  def fit_scaling(self, points: list[tuple[int, float]]
                  ) -> scaling_law.ScalingFit | None:
    """The scaling law through `points`; None below two batch sizes."""
    if len(points) < 2:
      return None
    return scaling_law.fit(*zip(*points), held_out_size=self.held_out_size)

  @property
  def scaling(self) -> scaling_law.ScalingFit | None:
    """The law through the search's unselected points (`scaling_points`)."""
    return self.fit_scaling(self.scaling_points)

  @property
  def triplet(self) -> triplet_lib.PrivacyTriplet:
    return self.privacy.triplet

  def peak_batch(self) -> dict[str, Any]:
    """The largest step the sampler allows, and what one worker holds of it.

    Poisson has no cap: B + 4 sqrt(B) is shown as the size it rarely passes
    (about 3 steps in 100,000).
    """
    batch = self.triplet.batch_size
    cap = self.privacy.scheme.cap(batch)
    peak = cap or batch + math.ceil(4 * math.sqrt(batch))
    per_worker = math.ceil(peak / self.workers)
    copies = self.config.augment.multiplicity
    rows = min(per_worker, self.config.max_physical_batch) * copies
    return {
        "max_batch_size": cap,
        "peak_examples": peak,
        "per_worker": per_worker,
        "micro_batch_rows": rows,
        "micro_batch_input_mib": rows * math.prod(self.input_shape) * 4 / 2**20,
    }

  @property
  def trial_gpus(self) -> float:
    """GPUs the promoted trial reserved; its calibration runs reserve as many."""
    return self.outcome.space.resources.gpu_for(
        self.trial["params"][trials.SIMULATION_BATCH_SIZE])

  @property
  def calibration_vs_reference(self) -> float:
    """The calibration runs' examples over the reference run's."""
    batches = sum(p[trials.SIMULATION_BATCH_SIZE] for p in self.calibration)
    reference = self.outcome.space.reference.batch_size
    return self.calibration_seeds * batches / reference

  @property
  def ledger_id(self) -> str | None:
    """The dataset's random ledger id in the store: what people see of it;
    None before its first charge there."""
    return next((e.ledger_id for e in self.ledger.earlier if e.ledger_id),
                None)

  @property
  def tuning_guarantee(self) -> str:
    """What the search's way of tuning guarantees, said beside any eps."""
    return tuning_mode.named(self.outcome.space.tuning_privacy).guarantee

  @property
  def compute_vs_trial(self) -> float:
    """Examples processed by the reference run over those of the trial."""
    return self.record.compute_saving

  def as_dict(self) -> dict[str, Any]:
    return {
        "search_run_id": self.outcome.parent_run_id,
        "trial_id": self.trial["trial_id"],
        "trial_run_id": self.trial.get("mlflow_run_id"),
        "params": self.trial["params"],
        "reference_run": config_io.to_dict(self.config),
        "privacy": self.privacy.as_dict(),
        "tuning_privacy": self.outcome.space.tuning_privacy,
        "tuning_guarantee": self.tuning_guarantee,
        "default_accountant": self.privacy.scheme.default_accountant,
        "target_epsilon": self.target_epsilon,
        "compute_vs_trial": self.compute_vs_trial,
        "workers": self.workers,
        "gpus_per_worker": self.gpus_per_worker,
        "time_estimate": self.time.as_dict() if self.time else None,
        "calibration_seconds": self.calibration_seconds,
        "scaling_law": (
            self.scaling.as_dict(self.triplet.batch_size)
            if self.scaling else None),
        # Selected as the best of the search: optimistic, never fitted.
        "winner_search_score": {self.outcome.space.metric: self.trial[
            self.outcome.space.metric]},
        "select_on": self.outcome.space.select_on,
        "dataset_ledger_id": self.ledger_id,
        "ledger": self.ledger.as_dict(),
        "dataset_in_ledger": self.dataset_in_ledger,
        "new_ledger": self.new_ledger,
        "peak_batch": self.peak_batch(),
        "calibration_batch_sizes": [
            p[trials.SIMULATION_BATCH_SIZE]
            for p in self.calibration],
        "calibration_seeds": self.calibration_seeds,
        "model_weights_sha256": self.weights_digest,
        "calibration_vs_reference": self.calibration_vs_reference,
        "served_model": self.served.as_dict(),
        "front_end": self.front_end,
    }


def plan_promotion(
    outcome: search_outcome.SearchOutcome,
    trial_id: str | None = None,
    workers: int = 1,
    gpus_per_worker: float | None = None,
    max_physical_batch: int | None = None,
    target: float | None = None,
    calibrate: bool = False,
    new_ledger: bool = False,
    embedded_ray: bool = True,
    calibration_seeds: int = 1,
) -> PromotionPlan:
  """Builds the reference run of a trial and checks it against the budget.

  Args:
    outcome: the finished search.
    trial_id: the trial to promote; None takes the best finished one.
    workers: data-parallel workers.
    gpus_per_worker: None reserves one GPU per worker when the search's trials
      used GPUs, none otherwise.
    max_physical_batch: overrides the search's micro-batch size.
    target: tightens the search file's target epsilon.
    calibrate: plan runs of the winner at B_ref / 64, / 32, / 16.
    calibration_seeds: with `calibrate`, runs at each of them.
    new_ledger: the store may start the dataset's ledger (its first private
      run here); the plan says so either way, the run refuses without it.
    embedded_ray: the run will start its own Ray (no `--address`), which the
      time estimate counts.

  Raises:
    ConfigError: a bad option, an unknown trial, or data that changed size.
    gate.PromotionRefused: the gate said no.
  """
  gpus_per_worker = _checked_options(outcome.space, workers, gpus_per_worker,
                                     calibration_seeds)
  data = _private_data(outcome)
  budget = gate.target_epsilon(outcome.space, target)
  winner = search_outcome.pick_trial(outcome, trial_id)
  record = trial_record.build(outcome.resolved, winner["params"],
                              max_physical_batch=max_physical_batch)
  config = record.reference_run
  report, report_seconds = _gated_report(outcome, config, data.num_train,
                                         budget)
  held_out_size = len(splits.evaluation_splits(
      data.train, data.test, config.validation_fraction,
      config.dataset.seed)[1])
  calibration_params = (
      calibration.calibration_params(outcome, winner) if calibrate else [])
  entry, charged, composition = _ledger(outcome, winner, data, report,
                                        budget, config)
  return PromotionPlan(
      outcome=outcome,
      trial=winner,
      config=config,
      record=record,
      privacy=report,
      target_epsilon=budget,
      workers=workers,
      gpus_per_worker=gpus_per_worker,
      time=time_estimate.estimate(
          config, input_shape=tuple(data.input_shape),
          num_classes=data.num_classes, dataset_size=data.num_train,
          held_out_size=held_out_size,
          workers=workers, cpus_per_worker=outcome.space.resources.cpu,
          use_gpu=gpus_per_worker > 0, embedded_ray=embedded_ray,
          report_seconds=report_seconds,
          account_seconds=time_estimate.accounting_seconds(
              report.triplet, report.delta, report.scheme)),
      calibration_seconds=_calibration_seconds(
          calibration_params * calibration_seeds, config.privacy.steps,
          winner.get("examples_per_second")),
      scaling_points=calibration.scaling_points(outcome, winner),
      calibration=calibration_params,
      calibration_seeds=calibration_seeds,
      ledger_entry=entry,
      ledger=composition,
      dataset_in_ledger=bool(charged),
      new_ledger=new_ledger,
      input_shape=tuple(data.input_shape),
      held_out_size=held_out_size,
      **_served(outcome, config, data),
  )


def _checked_options(space, workers: int, gpus_per_worker: float | None,
                     calibration_seeds: int) -> float:
  """GPUs per worker (one if the trials used GPUs, unless said), checked."""
  if workers < 1:
    raise ConfigError("--workers", workers, "an integer >= 1")
  if calibration_seeds < 1:
    raise ConfigError("--calibration-seeds", calibration_seeds,
                      "an integer >= 1")
  if gpus_per_worker is None:
    gpus_per_worker = 1.0 if space.resources.uses_gpus() else 0.0
  if gpus_per_worker < 0:
    raise ConfigError("--gpus-per-worker", gpus_per_worker, "a number >= 0")
  return gpus_per_worker


def _private_data(outcome: search_outcome.SearchOutcome) -> datasets.Dataset:
  """The private data as the search saw it (same N), delta <= 1/N."""
  space = outcome.space
  data = datasets.load_dataset(space.dataset)
  if space.public_dataset:  # Searched on public data: never on these.
    tuning_mode.check_public_dataset(
        space, data, datasets.load_dataset(space.public_dataset))
  if data.num_train != outcome.dataset_size:
    raise ConfigError(
        "dataset", space.dataset.title,
        f"the data the search saw (N = {outcome.dataset_size}); it now has"
        f" N = {data.num_train}, so q and epsilon would differ")
  triplet_lib.require_private_delta("reference.delta",
                                    space.reference.delta, data.num_train)
  return data


def _gated_report(outcome: search_outcome.SearchOutcome,
                  config: trial_config.TrialConfig, dataset_size: int,
                  budget: float
                  ) -> tuple[privacy_report_lib.PrivacyReport, float]:
  """The reference run's privacy report once the gate let it through, and
  the seconds it took (the time estimate counts them)."""
  triplet = triplet_lib.PrivacyTriplet(
      dataset_size, config.privacy.batch_size,
      config.privacy.noise_multiplier, config.privacy.steps)
  delta, scheme = outcome.resolved.delta, config.privacy.scheme
  gate.check_budget(triplet, delta, budget, scheme)
  started = time.perf_counter()
  report = privacy_report_lib.privacy_report(triplet, delta, scheme=scheme)
  return report, time.perf_counter() - started


def _ledger(outcome: search_outcome.SearchOutcome, winner: dict[str, Any],
            data: datasets.Dataset,
            report: privacy_report_lib.PrivacyReport, budget: float,
            config: trial_config.TrialConfig
            ) -> tuple[ledger_lib.Entry, list[ledger_lib.Entry],
                       composition_lib.Composition]:
  """What the run charges under this attempt's key, the dataset's entries
  already charged, and their composition once the ledger's gate let it
  through."""
  attempt = attempts.current(outcome.tracking_uri, attempts.read_state(
      attempts.folder(outcome.directory, winner["trial_id"])))
  entry = ledger_lib.Entry(
      dataset_identity=datasets.examples(data),
      dataset_name=outcome.space.dataset.title,
      promotion=ledger_lib.promotion_key(
          outcome.parent_run_id, winner["trial_id"], attempt),
      triplet=report.triplet,
      delta=report.delta,
      epsilon=report.epsilon.epsilon,
      budget=budget,
      scheme=report.scheme,
      config_sha256=trial_config.charged_digest(config),
  )
  charged = ledger_lib.Ledger(outcome.tracking_uri).entries(
      entry.dataset_identity)
  composition = composition_lib.compose(charged, entry)
  gate.check_ledger(composition, outcome.space.dataset.title)
  return entry, charged, composition


def _served(outcome: search_outcome.SearchOutcome,
            config: trial_config.TrialConfig,
            data: datasets.Dataset) -> dict[str, Any]:
  """What the run will release: the MLflow Model, how its front end is
  computed, the digest of its starting weights."""
  shape = tuple(data.input_shape)
  return {
      "served": served_model.Servable.plan(
          config.model, served_model.Inputs.of(data), outcome.space.metric,
          config.optim.ema_decay is not None),
      "front_end": fixed_features.describe(
          config.model, shape, data.num_classes, config.augment.family,
          audited=False),
      "weights_digest": (plugins.file_digest("model.weights",
                                             config.model.weights)
                         if config.model.weights else None),
  }


def _calibration_seconds(params: list[dict[str, Any]], steps: int,
                         throughput: float | None) -> float | None:
  """The calibration runs' examples over the trial's examples per second."""
  if not params or not throughput:
    return None
  examples = sum(p[trials.SIMULATION_BATCH_SIZE] for p in params) * steps
  return examples / throughput
