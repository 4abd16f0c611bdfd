"""The ScatterNet trial with its fixed front end computed once, against every
step, side by side in one run.

For the ScatterNet classifier of the Fashion-MNIST frontier search (the
transform, GroupNorm with 27 groups, a linear layer), at the frontier's
trial batch B'_ref / 16 = 256, the same run twice: once as today's trials
run it (the transform at every step) and once on features computed once
(`fixed_features.py`). It prints the seconds per logical step of each, their
ratio, the one-off cost of the features, the seconds of one evaluation of
the held-out split, and the largest difference between the two runs' head
weights after the same steps with the same (public) seeds. Then, on the same
features, the head's step at one of two workers' share of the promoted
run's batch (B_ref = 2896 for S' = 1200: 1,448) as fast clipping takes it,
in closed form (`norm_head_clipping.py`), against the general path that
records a forward and runs a backward.

Needs the Fashion-MNIST files (`apt-get install dataset-fashion-mnist`);
`--smoke` runs a few steps on synthetic 28x28 images instead.
Run: .venv/bin/python benchmarks/features_once.py [--steps 10] [--smoke]
"""

import argparse
import datetime
import platform
import time

import torch

from tan_tune.training import datasets
from tan_tune.training import fixed_features
from tan_tune.training import models
from tan_tune.training import norm_head_clipping
from tan_tune.training import run_state
from tan_tune.training import trial_config

BATCH = 256
# One of two workers' share of the S' = 1200 reference batch, 2896.
HEAD_BATCH = 1448


def _config(dataset: datasets.DatasetConfig, steps: int,
            batch: int = BATCH) -> trial_config.TrialConfig:
  return trial_config.TrialConfig(
      dataset=dataset,
      model=models.ModelConfig(name="scatternet", num_groups=27),
      privacy=trial_config.PrivacyConfig(
          batch_size=batch, noise_multiplier=2.662 * batch / 4096,
          steps=steps, reference_batch_size=4096),
      optim=trial_config.OptimConfig(lr=4.0, momentum=0.0, ema_decay=0.99),
      max_physical_batch=256, eval_every=steps, device="cpu",
      validation_fraction=0.1)


def _measure(config: trial_config.TrialConfig, cached: bool,
             shared: dict[str, fixed_features.Features] | None = None) -> dict:
  """Builds the run (timing the features, unless `shared` holds them),
  takes its steps and one evaluation; returns the seconds, the head's
  weights and the features."""
  started = time.perf_counter()
  if cached:
    shared = shared or fixed_features.for_networks(
        config.dataset, [config.model], ["none"], torch.device("cpu"))
    run = run_state.RunState(config, shared_features=shared)
  else:
    original = fixed_features.skipped_because
    fixed_features.skipped_because = lambda *_: "measured without the cache"
    try:
      run = run_state.RunState(config)
    finally:
      fixed_features.skipped_because = original
  setup = time.perf_counter() - started
  run.train_step()  # Warm-up, not timed.
  started = time.perf_counter()
  for _ in range(config.privacy.steps - 1):
    run.train_step()
  step = (time.perf_counter() - started) / (config.privacy.steps - 1)
  started = time.perf_counter()
  metrics = run.evaluate()
  evaluation = time.perf_counter() - started
  weights = {name: p.detach().clone()
             for name, p in run.model.named_parameters()}
  return {"setup": setup, "step": step, "evaluation": evaluation,
          "weights": weights, "accuracy": metrics["ema_accuracy"],
          "features": shared}


def _recorded(config: trial_config.TrialConfig,
              shared: dict[str, fixed_features.Features]) -> dict:
  """`_measure` of the head with the closed form turned off: fast clipping's
  general path, a recorded forward and a backward."""
  original = norm_head_clipping.covers
  norm_head_clipping.covers = lambda *_: False
  try:
    return _measure(config, cached=True, shared=shared)
  finally:
    norm_head_clipping.covers = original


def _largest_difference(first: dict, second: dict) -> float:
  return max(float((second["weights"][name] - value).abs().max())
             for name, value in first["weights"].items())


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--steps", type=int, default=10)
  parser.add_argument("--smoke", action="store_true",
                      help="3 steps on synthetic 28x28 images")
  args = parser.parse_args()
  dataset = datasets.DatasetConfig(name="fashion-mnist")
  steps = args.steps
  if args.smoke:
    dataset = datasets.DatasetConfig(
        name="synthetic", image_size=28, channels=1, train_size=4096,
        test_size=256)
    steps = 3
  torch.set_num_threads(1)  # One trial's share of a 2-core machine.
  config = _config(dataset, steps)
  every_step = _measure(config, cached=False)
  once = _measure(config, cached=True)
  print(f"# {datetime.date.today()} {platform.processor() or platform.machine()}"
        f", torch threads 1, {dataset.title}, B = {BATCH}, {steps} steps")
  print(f"step every-step {every_step['step']:.4f} s, once"
        f" {once['step']:.4f} s, every-step / once"
        f" {every_step['step'] / once['step']:.1f}")
  print(f"evaluation every-step {every_step['evaluation']:.2f} s, once"
        f" {once['evaluation']:.2f} s")
  print(f"features once: {once['setup']:.1f} s to build the run"
        f" (every-step {every_step['setup']:.1f} s)")
  print(f"head weights after {steps} steps: largest difference"
        f" {_largest_difference(every_step, once):.2e}; ema_accuracy"
        f" {every_step['accuracy']:.4f} {once['accuracy']:.4f}")
  head = _config(dataset, steps, HEAD_BATCH)
  recorded = _recorded(head, once["features"])
  closed = _measure(head, cached=True, shared=once["features"])
  print(f"head step at B = {HEAD_BATCH}: recorded {recorded['step']:.4f} s,"
        f" closed form {closed['step']:.4f} s, recorded / closed form"
        f" {recorded['step'] / closed['step']:.2f}; largest difference"
        f" {_largest_difference(recorded, closed):.2e}")


if __name__ == "__main__":
  main()
