"""Each trial of a search: Optuna's define-by-run space and the trial's run.

`define_by_run` draws a trial's hyper-parameters from the file's
distributions; `run_config` turns them into the `TrialConfig` the trial
trains, at the simulated triplet (B, sigma_ref B / B_ref, S) of the
reference run or of its constant-eta alternative (TAN section 4.3, table 3),
on the search's public dataset when it has one. In a private random search
a trial is a private run at the reference triplet itself.
`reference_config` moves a trial's run to its reference triplet and the
private data: the run `promote` trains.
"""

import collections
import dataclasses
from typing import Any, Callable

import optuna

from tan_tune.privacy import triplet as triplet_lib
from tan_tune.search import compute
from tan_tune.search import resolved as resolved_lib
from tan_tune.search import space as space_lib
from tan_tune.search.hyperparameters import check
from tan_tune.search.hyperparameters import Distribution
from tan_tune.search.hyperparameters import HYPERPARAMETERS
from tan_tune.search.hyperparameters import RULES
from tan_tune.training import trial_config

# Keys a trial's params hold besides the hyper-parameters.
SIMULATION_BATCH_SIZE = "simulation_batch_size"
STEPS = "steps"


def define_by_run(
    space: space_lib.SearchSpace,
) -> Callable[[optuna.trial.Trial], dict[str, Any]]:
  """The space as an Optuna define-by-run function, for OptunaSearch.

  Suggests every hyper-parameter of the file under its key, skipping those
  whose condition fails (dampening when momentum = 0, augmult when
  augmentation = 'none'), then `simulation_batch_size` (a constant when there
  is one) and `steps` (only with a steps_grid).

  Returns:
    A function of an Optuna trial that returns the constants of the trial.
  """

  def suggest(trial: optuna.trial.Trial) -> dict[str, Any]:
    _draw(space, lambda key, distribution: distribution.suggest(trial, key))
    constants = {}
    batch_sizes = space.simulation_batch_sizes
    if len(batch_sizes) > 1:
      trial.suggest_categorical(SIMULATION_BATCH_SIZE, list(batch_sizes))
    else:
      constants[SIMULATION_BATCH_SIZE] = batch_sizes[0]
    steps = space.proposed_steps()
    if steps:
      trial.suggest_categorical(STEPS, list(steps))
    return constants

  return suggest


def central_params(space: space_lib.SearchSpace) -> dict[str, Any]:
  """A trial at the centre of the space (`Distribution.center`), at its
  first simulated batch size: a run the file stands for before any search."""
  params = _draw(space, lambda _, distribution: distribution.center())
  params[SIMULATION_BATCH_SIZE] = space.simulation_batch_sizes[0]
  return params


def _draw(space: space_lib.SearchSpace,
          draw: Callable[[str, Distribution], Any]) -> dict[str, Any]:
  """`draw` of every hyper-parameter of the file, in RULES' order, skipping
  those whose condition the earlier draws fail."""
  drawn = {}
  for key, rule in RULES.items():
    distribution = space.hyperparameters.get(key)
    condition = rule.condition
    # A parent the file does not search is fixed, and its check found that
    # it enables; a searched one must have been drawn, and enable.
    if distribution is None or (
        condition and condition.parent in space.hyperparameters
        and not (condition.parent in drawn
                 and condition.enables(drawn[condition.parent]))):
      continue
    drawn[key] = draw(key, distribution)
  return drawn


def _triplet_info(triplet: triplet_lib.PrivacyTriplet) -> dict[str, Any]:
  return {
      "batch_size": triplet.batch_size,
      "noise_multiplier": triplet.noise_multiplier,
      "steps": triplet.steps,
  }


def run_config(
    resolved: resolved_lib.ResolvedSearch, params: dict[str, Any]
) -> tuple[trial_config.TrialConfig, dict[str, Any]]:
  """The run of one trial, at its simulated triplet.

  The run's reference is (B_ref, sigma_ref, S_ref), or with params['steps'] =
  S its constant-eta alternative (B_ref sqrt(S_ref / S), sigma_ref, S) with
  lr x S_ref / S. The trial simulates it at the batch params[
  'simulation_batch_size'] gives for B_ref, scaled alike: B = B_sim * B'_ref /
  B_ref, sigma = sigma_ref * B / B'_ref, same S (table 3).

  Args:
    resolved: the search, resolved against its data.
    params: a trial's hyper-parameters and constants, as `define_by_run`
      produced them; hyper-parameters absent keep TrialConfig's defaults.

  Returns:
    The TrialConfig, and JSON-ready facts about it: the simulated and
    reference triplets, eta, eta_step, lr_scale and compute_saving.

  Raises:
    ConfigError: params has an unknown key, or does not fit the space.
  """
  for key in params:
    check(key in RULES or key in (SIMULATION_BATCH_SIZE, STEPS),
           f"params.{key}", params[key],
           f"unknown parameter; allowed: {', '.join(HYPERPARAMETERS)},"
           f" {SIMULATION_BATCH_SIZE}, {STEPS}")
  for key in ("lr", SIMULATION_BATCH_SIZE):
    check(key in params, f"params.{key}", None, "required")
  space, reference = resolved.space, resolved.reference
  simulated_reference = triplet_lib.simulate(
      reference, params[SIMULATION_BATCH_SIZE])
  alternative = triplet_lib.ConstantEtaTriplet(reference, lr_scale=1.0)
  if STEPS in params:
    alternative = triplet_lib.constant_eta_triplets(
        reference, [params[STEPS]])[0]
  simulated = triplet_lib.simulate_alternative(
      alternative, reference, simulated_reference).triplet
  run_reference = alternative.triplet
  config = trial_config.TrialConfig(
      dataset=space.trial_dataset,
      model=space.model,
      privacy=trial_config.PrivacyConfig(
          batch_size=simulated.batch_size,
          noise_multiplier=simulated.noise_multiplier,
          steps=simulated.steps,
          clip_norm=space.reference.clip_norm,
          reference_batch_size=run_reference.batch_size,
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
  config = dataclasses.replace(config, **{
      section: dataclasses.replace(getattr(config, section), **fields)
      for section, fields in sections.items()
  })
  info = {
      "dataset_size": resolved.dataset_size,
      # C = B'_ref S K of the run this trial stands for.
      "reference_examples": compute.reference_examples(
          run_reference.batch_size, run_reference.steps,
          config.augment.multiplicity),
      "simulated": _triplet_info(simulated),
      "reference": _triplet_info(run_reference),
      "eta": run_reference.eta,
      "eta_step": run_reference.eta_step,
      "lr_scale": alternative.lr_scale,
      "compute_saving": triplet_lib.compute_saving(run_reference, simulated),
  }
  return config, info


def reference_config(
    resolved: resolved_lib.ResolvedSearch, params: dict[str, Any]
) -> tuple[trial_config.TrialConfig, dict[str, Any]]:
  """The trial's run moved to the triplet it simulated.

  Returns:
    The reference TrialConfig (private, not a simulation, trained on the
    whole training set and evaluated on test) and the trial's facts from
    `run_config` (simulated and reference triplets, lr_scale,
    compute_saving).
  """
  simulated, info = run_config(resolved, params)
  reference = info["reference"]
  privacy = dataclasses.replace(
      simulated.privacy,
      batch_size=reference["batch_size"],
      noise_multiplier=reference["noise_multiplier"],
      steps=reference["steps"],
      reference_batch_size=None,
  )
  # The private data, even when the trials ran on public data.
  return dataclasses.replace(
      simulated, dataset=resolved.space.dataset, privacy=privacy,
      validation_fraction=0.0,
      eval_every=trial_config.private_eval_every(
          privacy.steps, simulated.eval_every)), info
