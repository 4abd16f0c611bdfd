"""One trial of a search as a typed record, derived in this one place.

`build` turns the search resolved against its data and a trial's params (as
`trials.define_by_run` draws them) into a `TrialRecord`: the run the trial
trains, at the simulated triplet (B, sigma_ref B / B_ref, S) of the
reference run or of its constant-eta alternative (TAN section 4.3, table 3),
on the search's public dataset when it has one; the run it stands for, at
that reference triplet on the private data (what `promote` trains, and each
trial of a private random search); and, once the trial has ended, its status
and last metrics. The callbacks log it, the results rank it, the plan
promotes it: nothing else turns params into a run.
"""

import collections
import dataclasses
from typing import Any, Mapping

from tan_tune.privacy import triplet as triplet_lib
from tan_tune.search import compute
from tan_tune.search import resolved as resolved_lib
from tan_tune.search import trials
from tan_tune.search.hyperparameters import check
from tan_tune.search.hyperparameters import HYPERPARAMETERS
from tan_tune.search.hyperparameters import RULES
from tan_tune.training import trial_config


@dataclasses.dataclass(frozen=True)
class TrialRecord:
  """One trial: its params, its two runs, their triplets, how it ended.

  Attributes:
    params: the trial's hyper-parameters and constants.
    config: the run the trial trains, at `simulated`: a simulation, not
      private.
    reference_run: the run it stands for, at `reference`: private, on the
      whole private training set, evaluated on test.
    simulated: (N, B, sigma, S) of `config`.
    reference: (N, B'_ref, sigma_ref, S) of `reference_run`: the reference
      triplet, or with params['steps'] its constant-eta alternative.
    lr_scale: S_ref / S, by which the lr of both runs was multiplied.
    trial_id: Tune's id of the trial; None when built from params alone
      (a promotion, a calibration run, the centre of the space).
    status: 'finished', 'pruned' or 'failed' once the trial ended; None
      before.
    metrics: the trial's last reported result; empty before.
  """

  params: Mapping[str, Any]
  config: trial_config.TrialConfig
  reference_run: trial_config.TrialConfig
  simulated: triplet_lib.PrivacyTriplet
  reference: triplet_lib.PrivacyTriplet
  lr_scale: float
  trial_id: str | None = None
  status: str | None = None
  metrics: Mapping[str, Any] = dataclasses.field(default_factory=dict)

  @property
  def compute_saving(self) -> float:
    """B'_ref / B: how many times fewer examples the trial processes than
    the run it stands for."""
    return triplet_lib.compute_saving(self.reference, self.simulated)

  @property
  def reference_examples(self) -> int:
    """C = B'_ref S K of the run the trial stands for (`compute.py`)."""
    return compute.reference_examples(
        self.reference.batch_size, self.reference.steps,
        self.config.augment.multiplicity)

  def as_params(self) -> dict[str, Any]:
    """The record's facts, JSON-ready: a trial's MLflow params, a
    calibration run's, and `best.json`'s `simulated`."""
    return {
        "dataset_size": self.reference.dataset_size,
        "reference_examples": self.reference_examples,
        "simulated": _triplet_params(self.simulated),
        "reference": _triplet_params(self.reference),
        "eta": self.reference.eta,
        "eta_step": self.reference.eta_step,
        "lr_scale": self.lr_scale,
        "compute_saving": self.compute_saving,
    }


def _triplet_params(triplet: triplet_lib.PrivacyTriplet) -> dict[str, Any]:
  return {
      "batch_size": triplet.batch_size,
      "noise_multiplier": triplet.noise_multiplier,
      "steps": triplet.steps,
  }


def build(resolved: resolved_lib.ResolvedSearch, params: Mapping[str, Any],
          trial_id: str | None = None, status: str | None = None,
          metrics: Mapping[str, Any] | None = None, *,
          max_physical_batch: int | None = None,
          calibration_seed: int | None = None) -> TrialRecord:
  """The record of one trial.

  The run's reference is (B_ref, sigma_ref, S_ref), or with params['steps'] =
  S its constant-eta alternative (B_ref sqrt(S_ref / S), sigma_ref, S) with
  lr x S_ref / S. The trial simulates it at the batch params[
  'simulation_batch_size'] gives for B_ref, scaled alike: B = B_sim * B'_ref /
  B_ref, sigma = sigma_ref * B / B'_ref, same S (table 3).

  Args:
    resolved: the search, resolved against its data.
    params: a trial's hyper-parameters and constants, as
      `trials.define_by_run` produced them; hyper-parameters absent keep
      TrialConfig's defaults.
    trial_id, status, metrics: how the trial ended, when it has.
    max_physical_batch: a promotion's micro-batch, in place of the search's.
    calibration_seed: the trial run is a calibration run of a promotion:
      trained and scored as the promoted run (no validation split), its
      public seed moved by this much for a replicate.

  Raises:
    ConfigError: params has an unknown key, or does not fit the space.
  """
  constants = (trials.SIMULATION_BATCH_SIZE, trials.STEPS)
  for key in params:
    check(key in RULES or key in constants, f"params.{key}", params[key],
          f"unknown parameter; allowed: {', '.join(HYPERPARAMETERS)},"
          f" {', '.join(constants)}")
  for key in ("lr", trials.SIMULATION_BATCH_SIZE):
    check(key in params, f"params.{key}", None, "required")
  reference = resolved.reference
  alternative = triplet_lib.ConstantEtaTriplet(reference, lr_scale=1.0)
  if trials.STEPS in params:
    alternative = triplet_lib.constant_eta_triplets(
        reference, [params[trials.STEPS]])[0]
  simulated = triplet_lib.simulate_alternative(
      alternative, reference,
      triplet_lib.simulate(reference, params[trials.SIMULATION_BATCH_SIZE]),
  ).triplet
  config = _simulation(resolved, params, simulated, alternative)
  if max_physical_batch is not None:
    config = dataclasses.replace(config, max_physical_batch=max_physical_batch)
  reference_run = _reference_run(resolved, config, alternative.triplet)
  if calibration_seed is not None:
    config = dataclasses.replace(config, validation_fraction=0.0,
                                 seed=config.seed + calibration_seed)
  return TrialRecord(
      params=dict(params), config=config, reference_run=reference_run,
      simulated=simulated, reference=alternative.triplet,
      lr_scale=alternative.lr_scale, trial_id=trial_id, status=status,
      metrics=dict(metrics or {}))


def _simulation(resolved: resolved_lib.ResolvedSearch,
                params: Mapping[str, Any],
                simulated: triplet_lib.PrivacyTriplet,
                alternative: triplet_lib.ConstantEtaTriplet
                ) -> trial_config.TrialConfig:
  """The run the trial trains: at `simulated`, with its hyper-parameters."""
  space = resolved.space
  config = trial_config.TrialConfig(
      dataset=space.trial_dataset,
      model=space.model,
      privacy=trial_config.PrivacyConfig(
          batch_size=simulated.batch_size,
          noise_multiplier=simulated.noise_multiplier,
          steps=simulated.steps,
          clip_norm=space.reference.clip_norm,
          reference_batch_size=alternative.triplet.batch_size,
          delta=space.reference.delta,
          sampling=space.reference.sampling,
          adjacency=space.reference.adjacency,
          truncation_stds=space.reference.truncation_stds,
          jl_projections=params.get("jl_projections", space.jl_projections),
      ),
      max_physical_batch=space.max_physical_batch,
      clipping=space.clipping,
      eval_every=space.eval_every,
      seed=space.seed,
      device=space.device,
      validation_fraction=(
          space.validation_fraction if space.select_on == "validation"
          else 0.0),  # A private search selects on test (`tuning_mode.py`).
  )
  sections = collections.defaultdict(dict)
  for key, rule in RULES.items():
    if key in params:
      sections[rule.section][rule.field] = params[key]
  sections["optim"]["lr"] = params["lr"] * alternative.lr_scale
  return dataclasses.replace(config, **{
      section: dataclasses.replace(getattr(config, section), **fields)
      for section, fields in sections.items()
  })


def _reference_run(resolved: resolved_lib.ResolvedSearch,
                   simulation: trial_config.TrialConfig,
                   reference: triplet_lib.PrivacyTriplet
                   ) -> trial_config.TrialConfig:
  """The simulation moved to the triplet it simulates: private, on the
  private data even when the trials ran on public data, trained on the
  whole training set and evaluated on test."""
  privacy = dataclasses.replace(
      simulation.privacy,
      batch_size=reference.batch_size,
      noise_multiplier=reference.noise_multiplier,
      steps=reference.steps,
      reference_batch_size=None,
  )
  return dataclasses.replace(
      simulation, dataset=resolved.space.dataset, privacy=privacy,
      validation_fraction=0.0,
      eval_every=trial_config.private_eval_every(
          privacy.steps, simulation.eval_every))
