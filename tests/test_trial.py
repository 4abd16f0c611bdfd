"""Tests of run_trial: accuracy on digits, resume, privacy flags, bad input."""

import dataclasses
import math

import pytest
import torch

from tan_tune import accounting
from tan_tune import augment
from tan_tune import datasets
from tan_tune import models
from tan_tune import trial
from tan_tune import triplet as triplet_lib
from tan_tune.errors import ConfigError

DIGITS_N = 1437


def _config(**privacy):
  defaults = dict(batch_size=64, noise_multiplier=1.0, steps=12)
  defaults.update(privacy)
  return trial.TrialConfig(
      dataset=datasets.DatasetConfig("digits"),
      model=models.ModelConfig("small-cnn"),
      privacy=trial.PrivacyConfig(**defaults),
      optim=trial.OptimConfig(lr=1.0, momentum=0.5, dampening=0.1,
                              ema_decay=0.9),
      augment=augment.AugmentConfig("crop-flip", multiplicity=2),
      eval_every=4,
      device="cpu",
  )


def test_non_private_digits_reaches_95_percent():
  config = trial.TrialConfig(
      dataset=datasets.DatasetConfig("digits"),
      model=models.ModelConfig("small-cnn"),
      privacy=trial.PrivacyConfig(64, 0.0, 300, private=False),
      optim=trial.OptimConfig(lr=0.1, ema_decay=0.99),
      eval_every=300,
      device="cpu",
  )
  metrics = trial.run_trial(config).metrics
  assert metrics["test_accuracy"] >= 0.95
  assert metrics["private"] is False and metrics["epsilon"] == math.inf


def test_private_digits_at_eps_8_reaches_88_percent():
  steps, batch_size = 100, 256
  sigma = accounting.calibrate_sigma(DIGITS_N, batch_size, steps, 8.0)
  config = trial.TrialConfig(
      dataset=datasets.DatasetConfig("digits"),
      model=models.ModelConfig("small-cnn"),
      privacy=trial.PrivacyConfig(batch_size, sigma, steps),
      optim=trial.OptimConfig(lr=2.0, ema_decay=0.9),
      eval_every=steps,
      device="cpu",
  )
  metrics = trial.run_trial(config).metrics
  assert metrics["epsilon"] <= 8.0  # RDP, delta = 1/N.
  assert metrics["accountant"] == "rdp" and metrics["private"] is True
  assert max(metrics["test_accuracy"], metrics["ema_test_accuracy"]) >= 0.88


def _weights(directory):
  state = torch.load(directory / trial.CHECKPOINT_FILE, weights_only=False)
  return state["model"], state["ema"], state["history"]


def test_a_resumed_run_ends_with_the_same_weights(tmp_path):
  config = _config()
  trial.run_trial(config, checkpoint_dir=tmp_path / "whole")

  class Killed(Exception):
    pass

  def kill_after_step_6(step):
    if step == 6:
      raise Killed()

  with pytest.raises(Killed):
    trial.run_trial(config, checkpoint_dir=tmp_path / "cut",
                    on_step=kill_after_step_6)
  assert _weights(tmp_path / "cut")[2][-1]["step"] == 4  # Last checkpoint.
  resumed = trial.run_trial(config, checkpoint_dir=tmp_path / "cut")

  whole_model, whole_ema, whole_history = _weights(tmp_path / "whole")
  cut_model, cut_ema, _ = _weights(tmp_path / "cut")
  for name, value in whole_model.items():
    assert torch.equal(cut_model[name], value), name
  for name, value in whole_ema.items():
    assert torch.equal(cut_ema[name], value), name
  steps = [m["step"] for m in resumed.history]
  assert steps == [4, 8, 12]  # Nothing lost, nothing reported twice.
  for mine, theirs in zip(resumed.history, whole_history):
    assert mine["test_accuracy"] == theirs["test_accuracy"]
    assert mine["augtest_accuracy"] == theirs["augtest_accuracy"]


def test_reports_every_eval_with_a_checkpoint(tmp_path):
  reports = []
  trial.run_trial(_config(), report=lambda m, c: reports.append((m, c)),
                  checkpoint_dir=tmp_path)
  assert [m["step"] for m, _ in reports] == [4, 8, 12]
  assert all(c == tmp_path for _, c in reports)
  last = reports[-1][0]
  for key in ("train_loss", "test_accuracy", "ema_test_accuracy",
              "augtest_accuracy", "examples_per_second", "epsilon"):
    assert key in last
  assert not list(tmp_path.glob("*.partial"))


def test_a_simulation_says_it_is_not_private():
  config = _config(noise_multiplier=0.5, reference_batch_size=512)
  metrics = trial.run_trial(config).metrics
  assert metrics["simulated"] is True and metrics["private"] is False
  # The reference run: B = 512, sigma = 0.5 * 8 = 4, the same 12 steps.
  reference = triplet_lib.PrivacyTriplet(DIGITS_N, 512, 4.0, 12)
  assert metrics["reference_epsilon"] == pytest.approx(
      accounting.epsilon(reference).epsilon)
  assert metrics["epsilon"] > metrics["reference_epsilon"]


def test_a_diverging_run_stops_with_a_clear_error():
  config = dataclasses.replace(
      _config(), optim=trial.OptimConfig(lr=1e12, ema_decay=None),
      privacy=trial.PrivacyConfig(256, 0.0, 50, private=False),
  )
  with pytest.raises(trial.TrialDiverged, match="diverged"):
    trial.run_trial(config)


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: _config(batch_size=5000), "privacy.batch_size"),
        (lambda: datasets.DatasetConfig("mnist"), "name"),
        (lambda: models.ModelConfig("resnet-9000"), "model.name"),
        (lambda: augment.AugmentConfig("cutmix"), "family"),
        (lambda: augment.AugmentConfig("crop-flip", multiplicity=0),
         "multiplicity"),
        (lambda: datasets.DatasetConfig("cifar10", root="/nonexistent"), "root"),
        (lambda: trial.PrivacyConfig(64, 0.0, 10), "noise_multiplier"),
        (lambda: trial.OptimConfig(lr=-1), "lr"),
    ],
)
def test_bad_input_names_the_field(make, field):
  with pytest.raises(ConfigError) as error:
    config = make()
    if isinstance(config, (trial.TrialConfig, datasets.DatasetConfig)):
      trial.run_trial(config if isinstance(config, trial.TrialConfig)
                      else dataclasses.replace(_config(), dataset=config))
  assert field in error.value.field
