"""Tests of trial_record: one trial's runs, triplets and outcome, typed,
derived once from the resolved search and its params."""

import dataclasses
import json

import pytest

from tan_tune.errors import ConfigError
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.search import resolved as resolved_lib
from tan_tune.search import trial_record
from tan_tune.training import trial_config

from space_files import DIGITS_N, load

# B_ref = 512, sigma_ref = 2.0555, S_ref = 100 on digits (`space_files.base`).
PARAMS = {"lr": 2.0, "simulation_batch_size": 64, "steps": 400,
          "augmentation": "crop-flip", "augmult": 2}


def _record(tmp_path, params=None, **changes):
  space = load(tmp_path, steps_grid=[100, 400], **changes)
  return trial_record.build(resolved_lib.resolve(space, DIGITS_N),
                            params or PARAMS)


def test_the_triplets_are_the_constant_eta_alternative_and_its_simulation(
    tmp_path):
  record = _record(tmp_path)
  # S = 400 keeps eta at B'_ref = 512 sqrt(100 / 400) = 256 and lr x 1/4;
  # B = 64 for B_ref simulates B'_ref at 32, sigma scaled alike.
  assert record.reference == triplet_lib.PrivacyTriplet(
      DIGITS_N, 256, 2.0555, 400)
  simulated = record.simulated
  assert (simulated.dataset_size, simulated.batch_size, simulated.steps) == (
      DIGITS_N, 32, 400)
  assert simulated.noise_multiplier == pytest.approx(2.0555 * 32 / 256)
  assert record.lr_scale == 0.25
  assert record.compute_saving == 8
  assert record.reference_examples == 256 * 400 * 2
  privacy = record.config.privacy
  assert (privacy.batch_size, privacy.steps, privacy.reference_batch_size) == (
      32, 400, 256)
  assert record.config.optim.lr == 0.5
  assert privacy.simulated and not privacy.claims_privacy


def test_the_reference_run_is_the_trial_moved_to_its_reference_triplet(
    tmp_path):
  public = {"name": "synthetic", "image_size": 8, "channels": 1}
  record = _record(tmp_path, tuning_privacy="public_data",
                   public_dataset=public, simulation_batch_sizes=[64])
  simulation, reference = record.config, record.reference_run
  assert simulation.dataset.name == "synthetic"
  assert reference.dataset.name == "digits"  # The private data.
  assert reference.privacy == dataclasses.replace(
      simulation.privacy, batch_size=256, noise_multiplier=2.0555, steps=400,
      reference_batch_size=None)
  assert reference.privacy.claims_privacy
  assert reference.validation_fraction == 0  # Trained on all, scored on test.
  assert reference.eval_every == trial_config.private_eval_every(
      400, simulation.eval_every)
  assert (reference.optim, reference.augment, reference.model) == (
      simulation.optim, simulation.augment, simulation.model)


def test_a_promotions_settings_are_derived_here_not_patched_afterwards(
    tmp_path):
  space = load(tmp_path, steps_grid=[100, 400])
  resolved = resolved_lib.resolve(space, DIGITS_N)
  plain = trial_record.build(resolved, PARAMS)
  promoted = trial_record.build(resolved, PARAMS, max_physical_batch=7)
  assert promoted.config.max_physical_batch == 7
  assert promoted.reference_run == dataclasses.replace(
      plain.reference_run, max_physical_batch=7)
  replicate = trial_record.build(resolved, PARAMS, calibration_seed=3)
  # Scored as the promoted run, on test; the public seed moved; the run it
  # stands for untouched.
  assert replicate.config == dataclasses.replace(
      plain.config, validation_fraction=0.0, seed=plain.config.seed + 3)
  assert replicate.reference_run == plain.reference_run


def test_its_params_are_the_trials_mlflow_params_json_ready(tmp_path):
  record = _record(tmp_path)
  params = record.as_params()
  assert params == json.loads(json.dumps(params))
  assert params == {
      "dataset_size": DIGITS_N,
      "reference_examples": record.reference_examples,
      "simulated": {"batch_size": 32, "steps": 400,
                    "noise_multiplier": record.simulated.noise_multiplier},
      "reference": {"batch_size": 256, "noise_multiplier": 2.0555,
                    "steps": 400},
      "eta": record.reference.eta,
      "eta_step": record.reference.eta_step,
      "lr_scale": 0.25,
      "compute_saving": 8.0,
  }


def test_a_trial_that_ended_carries_its_status_and_last_metrics(tmp_path):
  space = load(tmp_path)
  resolved = resolved_lib.resolve(space, DIGITS_N)
  params = {"lr": 1.0, "simulation_batch_size": 64}
  running = trial_record.build(resolved, params)
  assert (running.trial_id, running.status, running.metrics) == (
      None, None, {})
  ended = trial_record.build(resolved, params, trial_id="t1",
                             status="pruned", metrics={"step": 50})
  assert (ended.trial_id, ended.status, ended.metrics) == (
      "t1", "pruned", {"step": 50})
  assert ended.config == running.config
  with pytest.raises(dataclasses.FrozenInstanceError):
    ended.status = "finished"


@pytest.mark.parametrize("params, field", [
    ({"lr": 1.0, "simulation_batch_size": 64, "learning_rate": 1},
     "params.learning_rate"),
    ({"simulation_batch_size": 64}, "params.lr"),
    ({"lr": 1.0}, "params.simulation_batch_size"),
])
def test_params_outside_the_space_are_refused(tmp_path, params, field):
  with pytest.raises(ConfigError) as error:
    trial_record.build(resolved_lib.resolve(load(tmp_path), DIGITS_N),
                       params)
  assert error.value.field == field
