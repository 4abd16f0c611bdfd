"""How long a promotion will take, measured on this machine before it starts.

A promotion's wall time, from its plan to its last line, is

    T = T_ray + T_features + T_start + S t_step
        + E (t_eval + t_account + t_save) + T_finish

  T_ray     starting embedded Ray (none with `--address`: it is running);
  T_features a fixed front end's features of every example, computed once
            by the driver with its threads before training
            (`fixed_features.py`; 0 when the run takes the whole model at
            every step);
  T_start   Ray Train's worker group and process group, then each worker
            loading the data;
  t_step    one logical step of one worker: its share ceil(B_ref / W) of the
            batch in micro-batches of `max_physical_batch` examples, K
            augmented copies each, clipped, noised, EMA updated; the workers
            step in parallel, so W divides the batch and not the time, but
            workers on one machine share its cores and memory bandwidth, so
            their twins are timed stepping at once (on 2 cores two
            ScatterNet heads step 1.4x slower together than alone);
  E         the evaluations: every `eval_every` steps and the last;
  t_eval    rank 0 scoring the raw, EMA and AugTest models on the held-out
            split while the other ranks wait for it;
  t_account the epsilon spent, reported at each evaluation;
  t_save    the checkpoint taken at each evaluation;
  T_finish  Ray Train's shutdown, the final privacy report with every
            accountant, MLflow's artifacts and Ray's shutdown.

t_step, t_eval and t_save are timed on a synthetic twin of the run (random
images of the dataset's shape, the run's model, batch share, micro-batching,
AugMult, clipping and sigma) with the threads one worker gets, so the probe
reads nothing of the private data, and no time of the private data is
measured: even how long it takes to load is a statistic of it (compressed
images load at their own pace). T_ray, T_start and T_finish's fixed part are
start-up costs of Ray and of loading data of the bundled sizes, measured on
the project's machine (docs/benchmarks.md, "Predicting the promoted run's
time"); a cluster whose nodes start slower, or data that loads for minutes,
adds to them. A dataset read from disk at every step (ImageFolder) also
spends time the in-memory twin does not. The all-reduce of
the clipped sums is not timed: one node's gloo moves a small model's
gradient in milliseconds; across nodes, the network's share grows with the
model.
"""

import dataclasses
import json
import math
import os
import pathlib
import tempfile
import threading
import time
from typing import Any

import torch

from tan_tune import config_io
from tan_tune.privacy import accounting
from tan_tune.privacy import sampling_scheme
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.training import datasets
from tan_tune.training import fixed_features
from tan_tune.training import run_state
from tan_tune.training import trial_config

# Start-up costs of Ray itself, in seconds, measured on the project's 2-core
# machine (benchmarks/time_estimate.py prints them beside the probe's).
EMBEDDED_RAY_START_SECONDS = 3.0
RAY_TRAIN_START_SECONDS = 12.0
RAY_FINISH_SECONDS = 8.0
# Logical steps timed after one untimed warm-up step: at most this many,
# and no more once they have taken PROBE_SECONDS (a step that long averages
# out the jitter by itself; a JL twin's step can take seconds).
PROBE_STEPS = 3
PROBE_SECONDS = 1.0
# The synthetic twin's training set is one batch share (q = 1: every step
# takes all of it, and the plan holds no more random images than one
# worker's batch), its held-out split this many micro-batches: evaluation
# time is linear in the held-out size, so it is scaled up from there.
_TWIN_EVAL_MICRO_BATCHES = 4
# What this process has probed: (twin, threads, held-out size, together).
PROBES: dict[tuple[str, int, int, int], "Probe"] = {}


@dataclasses.dataclass(frozen=True)
class TimeEstimate:
  """A promotion's wall time, piece by piece (module docstring)."""

  ray_start_seconds: float
  features_seconds: float
  train_start_seconds: float
  step_seconds: float
  steps: int
  evaluation_seconds: float
  evaluations: int
  finish_seconds: float
  per_worker_batch: int
  threads: int
  device: str
  one_worker_step_seconds: float | None = None

  @property
  def one_worker_seconds(self) -> float | None:
    """The same run on one worker, when the workers share this machine."""
    if self.one_worker_step_seconds is None:
      return None
    return self.total_seconds + self.steps * (
        self.one_worker_step_seconds - self.step_seconds)

  @property
  def training_seconds(self) -> float:
    return (self.steps * self.step_seconds
            + self.evaluations * self.evaluation_seconds)

  @property
  def total_seconds(self) -> float:
    return (self.ray_start_seconds + self.features_seconds
            + self.train_start_seconds + self.training_seconds
            + self.finish_seconds)

  def as_dict(self) -> dict[str, Any]:
    return {**dataclasses.asdict(self),
            "training_seconds": self.training_seconds,
            "total_seconds": self.total_seconds,
            "one_worker_seconds": self.one_worker_seconds}


@dataclasses.dataclass(frozen=True)
class Probe:
  """What the synthetic twin measured, in seconds."""

  step_seconds: float
  evaluation_seconds: float
  checkpoint_seconds: float
  features_seconds_per_example: float
  # One twin's step when it stepped alone (step_seconds: beside the others).
  alone_step_seconds: float | None = None


def evaluations(steps: int, eval_every: int) -> int:
  """E: every `eval_every` steps, and the last step when it is not one."""
  return steps // eval_every + (steps % eval_every != 0)


def synthetic_twin(
    config: trial_config.TrialConfig, input_shape: tuple[int, ...],
    num_classes: int, workers: int, device: str,
    probe_steps: int = PROBE_STEPS,
) -> trial_config.TrialConfig:
  """The run at one worker's share of the batch, on random inputs.

  A simulation (it names its B_ref), so nothing in it is secret or charged.
  """
  share = math.ceil(config.privacy.batch_size / workers)
  dataset = datasets.DatasetConfig(
      None, factory="tan_tune.training.user_data:random_examples",
      kwargs={"input_shape": list(input_shape), "num_classes": num_classes,
              "train_size": share,
              "test_size": _TWIN_EVAL_MICRO_BATCHES * config.max_physical_batch})
  privacy = dataclasses.replace(
      config.privacy, batch_size=share, steps=probe_steps + 1,
      reference_batch_size=share, delta=None)
  return dataclasses.replace(
      config, dataset=dataset, privacy=privacy, device=device,
      validation_fraction=0.0, canaries=None, eval_every=probe_steps + 1)


def probe(twin: trial_config.TrialConfig, threads: int,
          held_out_size: int, together: int = 1) -> Probe:
  """Times the twin's steps (alone, then `together` twins stepping at once,
  as workers sharing this machine do), one evaluation scaled to
  `held_out_size`, and one checkpoint, with torch limited to `threads`
  threads each."""
  # A fixed front end's features: computed once, as the driver does (with
  # its threads), and shared by every twin below.
  shared = {}
  features = _seconds(lambda: shared.update(fixed_features.for_networks(
      twin.dataset, [twin.model], [twin.augment.family],
      torch.device(twin.device))), 1)
  before = torch.get_num_threads()
  torch.set_num_threads(threads)
  try:
    run = run_state.RunState(twin, shared_features=shared)
    run.train_step()  # Warm-up: allocation, kernels, autograd hooks.
    alone, steps = _timed_steps(run.train_step, twin.privacy.steps - 1)
    step_seconds = alone
    if together > 1:
      step_seconds = _steps_together(run, twin, together, shared, steps)
    evaluation = _seconds(run.evaluate, 1)
    with tempfile.TemporaryDirectory() as folder:
      checkpoint = _seconds(lambda: run.save(pathlib.Path(folder)), 1)
  finally:
    torch.set_num_threads(before)
  features = (features / (len(run.data.train) + len(run.data.test))
              if run.network is not run.model else 0.0)
  scale = held_out_size / twin.dataset.kwargs["test_size"]
  return Probe(step_seconds, evaluation * scale, checkpoint, features, alone)


def _steps_together(run: run_state.RunState, twin: trial_config.TrialConfig,
                    together: int,
                    shared: dict[str, fixed_features.Features],
                    steps: int) -> float:
  """One step's wall time when `together` twins take `steps` steps at once,
  each in its own thread (torch's kernels release the GIL), as Ray Train's
  workers on one machine do: they share its cores and memory bandwidth."""
  runs = [run] + [run_state.RunState(twin, shared_features=shared)
                  for _ in range(together - 1)]
  for other in runs[1:]:
    other.train_step()

  def step_all() -> None:
    threads = [threading.Thread(target=lambda r=r: [r.train_step()
                                                    for _ in range(steps)])
               for r in runs]
    for thread in threads:
      thread.start()
    for thread in threads:
      thread.join()

  return _seconds(step_all, 1) / steps


def _timed_steps(step, most: int) -> tuple[float, int]:
  """The mean wall time of `step` and how many were timed: `most`, or
  fewer once they have taken PROBE_SECONDS (always at least one)."""
  total, count = 0.0, 0
  while count < most and (count == 0 or total < PROBE_SECONDS):
    total += _seconds(step, 1)
    count += 1
  return total / count, count


def _seconds(action, repeats: int) -> float:
  """The mean wall time of `action` over `repeats` calls."""
  if torch.cuda.is_available():
    torch.cuda.synchronize()
  start = time.perf_counter()
  for _ in range(repeats):
    action()
  if torch.cuda.is_available():
    torch.cuda.synchronize()
  return (time.perf_counter() - start) / repeats


def accounting_seconds(triplet: triplet_lib.PrivacyTriplet, delta: float,
                       scheme: sampling_scheme.SamplingScheme) -> float:
  """t_account: one epsilon of the run's default accountant at its S."""
  return _seconds(
      lambda: accounting.epsilon_or_inf(triplet, delta, scheme=scheme), 1)


def estimate(
    config: trial_config.TrialConfig, *, input_shape: tuple[int, ...],
    num_classes: int, dataset_size: int, held_out_size: int, workers: int,
    cpus_per_worker: float,
    use_gpu: bool, embedded_ray: bool, report_seconds: float,
    account_seconds: float,
) -> TimeEstimate | None:
  """The promotion's wall time; None for GPU workers seen from a machine
  without a GPU, where the probe would time the wrong device.

  Args:
    config: the reference run.
    input_shape, num_classes: the dataset's.
    dataset_size: N, the examples of the training split.
    held_out_size: the split the run evaluates on.
    workers, cpus_per_worker, use_gpu: what each Ray Train worker gets.
    embedded_ray: the promotion starts its own Ray (no `--address`).
    report_seconds: the plan's privacy report (every accountant at S, a
      function of public numbers only), which the run computes again at its
      end.
    account_seconds: t_account.
  """
  if use_gpu and not torch.cuda.is_available():
    return None
  device = "cuda" if use_gpu else "cpu"
  threads = max(1, int(cpus_per_worker))
  twin = synthetic_twin(config, input_shape, num_classes, workers, device)
  # An embedded Ray's workers all share this machine; a cluster's spread.
  together = (min(workers, max(1, (os.cpu_count() or 1) // threads))
              if embedded_ray and device == "cpu" else 1)
  # Probed once per process for each twin: a machine's speed at a given
  # twin does not change between two plans of the same run (an API user
  # planning it again, a test planning many), and each probe trains.
  key = (json.dumps(config_io.to_dict(twin), sort_keys=True), threads,
         held_out_size, together)
  if key not in PROBES:
    PROBES[key] = probe(twin, threads, held_out_size, together)
  measured = PROBES[key]
  steps = config.privacy.steps
  return TimeEstimate(
      ray_start_seconds=EMBEDDED_RAY_START_SECONDS if embedded_ray else 0.0,
      # The driver computes them for both splits: test and held-out alike.
      features_seconds=measured.features_seconds_per_example * (
          dataset_size + held_out_size),
      train_start_seconds=RAY_TRAIN_START_SECONDS,
      step_seconds=measured.step_seconds,
      steps=steps,
      evaluation_seconds=(measured.evaluation_seconds + account_seconds
                          + measured.checkpoint_seconds),
      evaluations=evaluations(steps, config.eval_every),
      finish_seconds=RAY_FINISH_SECONDS + report_seconds,
      per_worker_batch=twin.privacy.batch_size,
      threads=threads,
      device=device,
      # One worker steps through every share alone.
      one_worker_step_seconds=(
          measured.alone_step_seconds * workers
          if together > 1 and measured.alone_step_seconds else None),
  )
