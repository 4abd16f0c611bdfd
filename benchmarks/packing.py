"""Trials per hour with 1 against 4 trials per GPU, on the same search.

The same search (the digits demo's space and Optuna seed, so the same trials)
runs twice through `search.run_search` on an embedded Ray with one GPU: once
with `resources.gpu: 1` (one trial at a time on it), once with 0.25 (four at a
time); the search allows all its trials at once, so the GPU share is what
limits them. With a CUDA device the trials train on it; without one, Ray
counts a fake GPU and the trials train on the CPU, each on the one thread Ray
gives a fractional-CPU worker, so the ratio then measures how much more of the
machine four trials at a time use.

Run: .venv/bin/python benchmarks/packing.py [--trials 8] [--steps 100] [--smoke]
"""

import argparse
import os
import pathlib
import platform
import tempfile
import time

import ray
import torch
import yaml

import _smoke
from tan_tune.search import driver as search

DEMO = pathlib.Path(__file__).parent.parent / "search_spaces" / "digits-demo.yaml"
# Without CUDA, Ray counts a fake GPU.
_RAY = {"num_cpus": os.cpu_count(), "num_gpus": 1}


def _trials_per_hour(folder, args, trials_per_gpu, device):
  """(wall seconds, finished trials per hour) of one search."""
  spec = yaml.safe_load(DEMO.read_text())
  spec.update(name=f"packing-{trials_per_gpu}", num_trials=args.trials,
              max_concurrent=args.trials, device=device, eval_every=args.steps,
              resources={"cpu": 0.25, "gpu": 1 / trials_per_gpu})
  spec["reference"]["steps"] = args.steps
  spec["reference"].pop("target_epsilon")  # Throughput only: no budget.
  path = folder / f"{spec['name']}.yaml"
  path.write_text(yaml.safe_dump(spec))
  # A fresh Ray for each search, unless --smoke's shared one is up.
  with _smoke.local_ray(not ray.is_initialized(), **_RAY):
    start = time.perf_counter()
    result = search.run_search(path, search.SearchOptions(
        storage=folder / "runs", verbose=0,
        tracking_uri=f"sqlite:///{folder}/mlflow.db"))
    seconds = time.perf_counter() - start
  finished = sum(row["status"] == "finished" for row in result.leaderboard)
  return seconds, finished * 3600 / seconds


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--trials", type=int, default=8)
  parser.add_argument("--steps", type=int, default=100)
  parser.add_argument("--smoke", action="store_true",
                      help="one trial of 2 steps, both searches on one Ray:"
                      " a check that it runs")
  args = parser.parse_args()
  if args.smoke:
    args.trials, args.steps = 1, 2
  os.environ.setdefault("RAY_AUTH_MODE", "disabled")
  device = "cuda" if torch.cuda.is_available() else "cpu"
  gpu = torch.cuda.get_device_name() if device == "cuda" else "a fake GPU"
  rows = []
  with tempfile.TemporaryDirectory() as folder, _smoke.local_ray(
      args.smoke, **_RAY):
    for trials_per_gpu in (1, 4):
      rows.append((trials_per_gpu, *_trials_per_hour(
          pathlib.Path(folder), args, trials_per_gpu, device)))
  print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs,"
        f" python {platform.python_version()}, torch {torch.__version__};"
        f" trials on {device}, one GPU: {gpu}")
  print(f"{args.trials} digits trials (small CNN, B = 64, S = {args.steps})"
        " through the search driver")
  print(f"{'trials per GPU':<16} {'wall s':>8} {'trials per hour':>16}")
  for trials_per_gpu, seconds, rate in rows:
    print(f"{trials_per_gpu:<16} {seconds:>8.1f} {rate:>16.0f}")
  print(f"4 per GPU: {rows[1][2] / rows[0][2]:.2f}x the trials per hour of 1")


if __name__ == "__main__":
  main()
