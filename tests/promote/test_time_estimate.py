"""Tests of the promotion's time estimate: its pieces and how they add up."""

import dataclasses
import pathlib

import pytest
import torch

from tan_tune.privacy import triplet as triplet_lib
from tan_tune.privacy.sampling_scheme import POISSON
from tan_tune.promote import time_estimate
from tan_tune.training import augment
from tan_tune.training import datasets
from tan_tune.training import models
from tan_tune.training import trial_config


@pytest.fixture(autouse=True)
def fresh_probes():
  """Each test sees its own probe (some replace it): none from the last."""
  time_estimate.PROBES.clear()
  yield
  time_estimate.PROBES.clear()


def _reference(batch_size=100, steps=45, eval_every=20):
  """A private reference run on digits (8x8, one channel, 10 classes)."""
  return trial_config.TrialConfig(
      dataset=datasets.DatasetConfig("digits"),
      model=models.ModelConfig("small-cnn"),
      privacy=trial_config.PrivacyConfig(batch_size, 2.0, steps, delta=1e-4),
      optim=trial_config.OptimConfig(lr=1.0, ema_decay=0.9),
      augment=augment.AugmentConfig("crop-flip", multiplicity=2),
      max_physical_batch=16,
      eval_every=eval_every,
      device="cpu",
  )


@pytest.mark.parametrize("steps, eval_every, expected", [
    (40, 20, 2), (45, 20, 3), (600, 100, 6), (5, 100, 1)])
def test_evaluations_count_every_eval_every_steps_and_the_last(
    steps, eval_every, expected):
  assert time_estimate.evaluations(steps, eval_every) == expected


def test_the_twin_is_one_workers_share_on_random_inputs():
  reference = _reference(batch_size=101)
  twin = time_estimate.synthetic_twin(reference, (1, 8, 8), 10, workers=2,
                                      device="cpu")
  # Nothing of the private data: random inputs of its shape and classes.
  assert twin.dataset.factory == "tan_tune.training.user_data:random_examples"
  assert (twin.dataset.kwargs["input_shape"],
          twin.dataset.kwargs["num_classes"]) == ([1, 8, 8], 10)
  # ceil(B / W) examples a step, micro-batched, augmented and clipped alike.
  assert twin.privacy.batch_size == 51
  assert twin.privacy.noise_multiplier == reference.privacy.noise_multiplier
  assert twin.privacy.clip_norm == reference.privacy.clip_norm
  assert twin.max_physical_batch == 16 and twin.augment == reference.augment
  assert twin.model == reference.model
  # A simulation: no secret seeds, nothing charged.
  assert twin.privacy.simulated and not twin.privacy.claims_privacy
  # One share to sample from (q = 1): the whole share every step.
  assert twin.dataset.kwargs["train_size"] == 51


def test_the_probe_times_steps_evaluation_and_checkpoint_and_keeps_threads():
  twin = time_estimate.synthetic_twin(_reference(), (1, 8, 8), 10, workers=1,
                                      device="cpu")
  threads = torch.get_num_threads()
  measured = time_estimate.probe(twin, threads=1, held_out_size=360)
  assert torch.get_num_threads() == threads
  assert measured.step_seconds > 0
  assert measured.evaluation_seconds > 0 and measured.checkpoint_seconds > 0


def test_evaluation_time_scales_with_the_held_out_split(monkeypatch):
  # One second per timed action: the evaluation of the twin's 64 held-out
  # images stands for 640.
  monkeypatch.setattr(time_estimate, "_seconds", lambda action, repeats: 1.0)
  twin = time_estimate.synthetic_twin(_reference(), (1, 8, 8), 10, workers=1,
                                      device="cpu")
  assert twin.dataset.kwargs["test_size"] == 64
  measured = time_estimate.probe(twin, threads=1, held_out_size=640)
  assert measured.evaluation_seconds == pytest.approx(10.0)
  assert measured.step_seconds == measured.checkpoint_seconds == 1.0
  assert measured.features_seconds_per_example == 0  # A CNN has none.


def test_a_fixed_front_end_is_timed_per_example_and_counted_once(
    monkeypatch):
  # One second for the features of the twin's 100 + 64 examples.
  monkeypatch.setattr(time_estimate, "_seconds", lambda action, repeats: 1.0)
  reference = dataclasses.replace(
      _reference(), model=models.ModelConfig(name="scatternet"),
      augment=augment.AugmentConfig("none"))
  twin = time_estimate.synthetic_twin(reference, (1, 8, 8), 10, workers=1,
                                      device="cpu")
  measured = time_estimate.probe(twin, threads=1, held_out_size=640)
  assert measured.features_seconds_per_example == pytest.approx(1 / (100 + 64))
  monkeypatch.setattr(time_estimate, "probe",
                      lambda twin, threads, size, together=1:
                      time_estimate.Probe(0.1, 0.5, 0.25, 0.01))
  estimate = _estimate()
  assert estimate.features_seconds == pytest.approx(0.01 * (1437 + 64))
  assert estimate.total_seconds == pytest.approx(
      dataclasses.replace(estimate, features_seconds=0).total_seconds
      + estimate.features_seconds)


def _estimate(**overrides):
  arguments = dict(
      input_shape=(1, 8, 8), num_classes=10, dataset_size=1437,
      held_out_size=64, workers=2,
      cpus_per_worker=1, use_gpu=False, embedded_ray=True,
      report_seconds=2.0, account_seconds=0.25)
  arguments.update(overrides)
  return time_estimate.estimate(_reference(), **arguments)


def test_the_estimate_adds_start_up_steps_evaluations_and_finish(monkeypatch):
  monkeypatch.setattr(time_estimate, "probe",
                      lambda twin, threads, size, together=1:
                      time_estimate.Probe(0.1, 0.5, 0.25, 0.0))
  estimate = _estimate()
  assert estimate.per_worker_batch == 50 and estimate.threads == 1
  assert estimate.evaluation_seconds == pytest.approx(0.5 + 0.25 + 0.25)
  assert estimate.evaluations == 3 and estimate.steps == 45
  assert estimate.train_start_seconds == time_estimate.RAY_TRAIN_START_SECONDS
  assert estimate.finish_seconds == pytest.approx(
      time_estimate.RAY_FINISH_SECONDS + 2.0)
  assert estimate.total_seconds == pytest.approx(
      time_estimate.EMBEDDED_RAY_START_SECONDS
      + time_estimate.RAY_TRAIN_START_SECONDS
      + 45 * 0.1 + 3 * 1.0 + time_estimate.RAY_FINISH_SECONDS + 2.0)
  assert estimate.as_dict()["total_seconds"] == estimate.total_seconds
  # An existing cluster (--address) is already running.
  assert _estimate(embedded_ray=False).ray_start_seconds == 0


def test_more_workers_time_a_smaller_share_with_their_threads(monkeypatch):
  seen = []
  monkeypatch.setattr(time_estimate, "probe",
                      lambda twin, threads, size, together=1: (
      seen.append((twin.privacy.batch_size, threads))
      or time_estimate.Probe(0.1, 0.5, 0.25, 0.0)))
  _estimate(workers=4, cpus_per_worker=2.5)
  assert seen == [(25, 2)]


def test_gpu_workers_get_no_estimate_from_a_machine_without_a_gpu(
    monkeypatch):
  monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
  assert _estimate(use_gpu=True) is None


def test_accounting_time_is_one_epsilon_at_s():
  triplet = triplet_lib.PrivacyTriplet(1437, 100, 2.0, 45)
  assert time_estimate.accounting_seconds(triplet, 1e-4, POISSON) > 0


def test_the_twin_times_records_that_are_not_images(monkeypatch):
  # A team's tabular run: its own MLP on records of 6 numbers, 3 classes.
  monkeypatch.syspath_prepend(str(pathlib.Path(__file__).resolve().parents[1]))
  reference = dataclasses.replace(
      _reference(),
      model=models.ModelConfig(factory="plugin_factories:tabular_mlp"),
      augment=augment.AugmentConfig("none"))
  twin = time_estimate.synthetic_twin(reference, (6,), 3, workers=1,
                                      device="cpu")
  measured = time_estimate.probe(twin, threads=1, held_out_size=60)
  assert measured.step_seconds > 0 and measured.evaluation_seconds > 0


def test_workers_sharing_this_machine_are_timed_stepping_together(
    monkeypatch):
  seen = []
  monkeypatch.setattr(time_estimate, "probe",
                      lambda twin, threads, size, together=1: (
                          seen.append(together)
                          or time_estimate.Probe(0.3, 0.5, 0.25, 0.0, 0.2)))
  monkeypatch.setattr(time_estimate.os, "cpu_count", lambda: 2)
  estimate = _estimate(workers=2)
  assert seen == [2] and estimate.step_seconds == 0.3
  # One worker takes both shares alone: 45 steps of 0.4 s, not 0.3.
  assert estimate.one_worker_seconds == pytest.approx(
      estimate.total_seconds + 45 * (0.4 - 0.3))
  # A cluster's workers are spread over its nodes: timed alone.
  assert _estimate(workers=2, embedded_ray=False).one_worker_seconds is None
  assert seen[-1] == 1


def test_two_twins_stepping_together_are_timed_on_the_wall_clock():
  twin = time_estimate.synthetic_twin(_reference(), (1, 8, 8), 10, workers=2,
                                      device="cpu")
  measured = time_estimate.probe(twin, threads=1, held_out_size=64,
                                 together=2)
  assert measured.step_seconds > 0 and measured.alone_step_seconds > 0


def test_a_twin_is_probed_once_per_process(monkeypatch):
  seen = []
  monkeypatch.setattr(time_estimate, "probe",
                      lambda twin, threads, size, together=1:
                      seen.append(twin) or time_estimate.Probe(
                          0.1, 0.5, 0.25, 0.0))
  first, again = _estimate(), _estimate()
  assert again == first and len(seen) == 1
  _estimate(workers=1)  # Another twin: a share of another size.
  assert len(seen) == 2


@pytest.mark.parametrize("budget, timed", [(0.0, 1), (float("inf"), 3)])
def test_steps_are_timed_until_they_fill_the_budget(monkeypatch, budget,
                                                    timed):
  """At least one step, at most PROBE_STEPS: a long step is timed once."""
  monkeypatch.setattr(time_estimate, "PROBE_SECONDS", budget)
  steps = []
  _, count = time_estimate._timed_steps(  # pylint: disable=protected-access
      lambda: steps.append(1), time_estimate.PROBE_STEPS)
  assert count == len(steps) == timed
