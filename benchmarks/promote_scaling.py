"""What a TAN simulation saves: a trial at B_ref / k against the run at B_ref.

For each k, `trial.run_trial` trains the simulated triplet (B_ref / k,
sigma_ref / k, S) and the reference (B_ref, sigma_ref, S) is trained once, all
in this process, one after the other, on the same synthetic data and model.
The ideal saving is k (k times fewer examples for the same S); per-step costs
that do not scale with B (the optimiser step, the noise draw, Python) make the
measured saving smaller at small batches. Printed: the wall time of each run
and of its S training steps alone (evaluation excluded), and the savings.

Run: .venv/bin/python benchmarks/promote_scaling.py [--steps 6] [--ks 4,8,16]
     [--smoke]
"""

import argparse
import os
import platform
import time

import torch

from tan_tune.training import datasets
from tan_tune.training import models
from tan_tune.training import trial
from tan_tune.training import trial_config


def _config(args, batch_size, noise_multiplier, reference_batch_size):
  return trial_config.TrialConfig(
      dataset=datasets.DatasetConfig(
          "synthetic", image_size=args.image_size, channels=3,
          num_classes=10, train_size=args.dataset_size, test_size=100),
      model=models.ModelConfig(args.model),
      privacy=trial_config.PrivacyConfig(
          batch_size=batch_size, noise_multiplier=noise_multiplier,
          steps=args.steps, reference_batch_size=reference_batch_size),
      optim=trial_config.OptimConfig(lr=1.0, momentum=0.0, ema_decay=0.999),
      max_physical_batch=args.max_physical_batch,
      eval_every=args.steps,
      device=args.device,
  )


def _timed(config):
  """(wall seconds, seconds of the S training steps) of one run."""
  marks = []
  start = time.perf_counter()
  trial.run_trial(config, on_step=lambda step: marks.append(
      time.perf_counter()))
  wall = time.perf_counter() - start
  # From the end of step 1 to the end of step S: model set-up and the final
  # evaluation excluded, and step 1's warm-up too.
  per_step = (marks[-1] - marks[0]) / (len(marks) - 1)
  return wall, per_step * len(marks)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--reference-batch-size", type=int, default=256)
  parser.add_argument("--sigma", type=float, default=4.0)
  parser.add_argument("--steps", type=int, default=6)
  parser.add_argument("--ks", default="4,8,16")
  parser.add_argument("--model", default="wrn-16-4")
  parser.add_argument("--image-size", type=int, default=16)
  parser.add_argument("--dataset-size", type=int, default=2048)
  parser.add_argument("--max-physical-batch", type=int, default=64)
  parser.add_argument("--device", default="auto")
  parser.add_argument("--smoke", action="store_true",
                      help="small-cnn, 2 steps, B_ref 16 in micro-batches of 8,"
                      " k = 2, 8x8 images: a check that it runs")
  args = parser.parse_args()
  if args.smoke:
    args.steps, args.ks, args.reference_batch_size = 2, "2", 16
    args.image_size, args.dataset_size, args.max_physical_batch = 8, 64, 8
    args.model = "small-cnn"  # WRN-16-4's first steps take seconds of CPU.
  ks = [int(k) for k in args.ks.split(",")]
  b_ref = args.reference_batch_size

  reference_wall, reference_steps = _timed(
      _config(args, b_ref, args.sigma, None))
  rows = []
  for k in ks:
    batch = b_ref // k
    wall, steps = _timed(_config(args, batch, args.sigma * batch / b_ref, b_ref))
    rows.append((k, batch, wall, steps))

  device = args.device if args.device != "auto" else (
      "cuda" if torch.cuda.is_available() else "cpu")
  name = torch.cuda.get_device_name() if device.startswith("cuda") else (
      f"CPU, {torch.get_num_threads()} threads")
  print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs,"
        f" python {platform.python_version()}, torch {torch.__version__};"
        f" device {device} ({name})")
  print(f"{args.model} on synthetic 3x{args.image_size}x{args.image_size},"
        f" N = {args.dataset_size}, S = {args.steps}, B_ref = {b_ref},"
        f" sigma_ref = {args.sigma}, micro-batches of {args.max_physical_batch}")
  print(f"{'run':<18} {'B':>6} {'wall s':>8} {'steps s':>8}"
        f" {'saving (wall)':>14} {'saving (steps)':>15} {'ideal':>6}")
  print(f"{'reference':<18} {b_ref:>6} {reference_wall:>8.1f}"
        f" {reference_steps:>8.1f}")
  for k, batch, wall, steps in rows:
    print(f"{f'simulated B_ref/{k}':<18} {batch:>6} {wall:>8.1f} {steps:>8.1f}"
          f" {reference_wall / wall:>13.2f}x {reference_steps / steps:>14.2f}x"
          f" {k:>5}x")


if __name__ == "__main__":
  main()
