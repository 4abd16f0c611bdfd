"""The ScatterNet trial with its fixed front end computed once, against every
step, side by side in one run.

For the ScatterNet classifier of the Fashion-MNIST frontier search (the
transform, GroupNorm with 27 groups, a linear layer), at the frontier's
trial batch B'_ref / 16 = 256, the same run twice: once as today's trials
run it (the transform at every step) and once on features computed once
(`fixed_features.py`). It prints the seconds per logical step of each, their
ratio, the one-off cost of the features, the seconds of one evaluation of
the held-out split, and the largest difference between the two runs' head
weights after the same steps with the same (public) seeds.

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
from tan_tune.training import run_state
from tan_tune.training import trial_config

BATCH = 256


def _config(dataset: datasets.DatasetConfig,
            steps: int) -> trial_config.TrialConfig:
  return trial_config.TrialConfig(
      dataset=dataset,
      model=models.ModelConfig(name="scatternet", num_groups=27),
      privacy=trial_config.PrivacyConfig(
          batch_size=BATCH, noise_multiplier=2.662 * BATCH / 4096,
          steps=steps, reference_batch_size=4096),
      optim=trial_config.OptimConfig(lr=4.0, momentum=0.0, ema_decay=0.99),
      max_physical_batch=256, eval_every=steps, device="cpu",
      validation_fraction=0.1)


def _measure(config: trial_config.TrialConfig, cached: bool) -> dict:
  """Builds the run (timing the features), takes its steps and one
  evaluation; returns the seconds and the head's weights."""
  started = time.perf_counter()
  if cached:
    run = run_state.RunState(config)
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
          "weights": weights, "accuracy": metrics["ema_accuracy"]}


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
  difference = max(float((once["weights"][name] - value).abs().max())
                   for name, value in every_step["weights"].items())
  print(f"head weights after {steps} steps: largest difference"
        f" {difference:.2e}; ema_accuracy {every_step['accuracy']:.4f}"
        f" {once['accuracy']:.4f}")


if __name__ == "__main__":
  main()
