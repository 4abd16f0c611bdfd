"""Does the ranking found at B_ref / k carry over to B_ref? (TAN table 2, fig. 4)

For each hyper-parameter configuration (lr, momentum), trains the shipped
space's reference run twice with everything else fixed: simulated at
B = B_ref / k with sigma = sigma_ref / k (not private), and for real at
(B_ref, sigma_ref) (private, secret seeds), both for the same S. Both columns
are scored on the test split with the space's metric, so they are comparable
(this is the paper's measurement; a search selects on validation instead).

Printed side by side: the two columns, the Spearman and Kendall rank
correlations between them, whether the configuration best at B_ref / k is the
best at B_ref, its regret (best accuracy at B_ref minus its accuracy at B_ref),
and the compute ratio of the columns, in examples and in wall time. Then the
scaling law: the configuration picked at B_ref / k is also trained at
B_ref / 4k and B_ref / 2k, the line through its three simulated points is
extrapolated to B_ref (`promote.scaling_law`) and set against its actual run.
The simulated column runs first, so its half of the table prints early.

A measurement on public data, not a private release: what it prints comes
from non-private simulations and from several private runs of the same data,
so it claims no privacy and charges no ledger. Private data is searched and
promoted with `tan-tune search` and `tan-tune promote`.

Run (about 50 minutes on 2 CPU cores for the Fashion-MNIST default):
  .venv/bin/python benchmarks/transfer.py \\
    [--space search_spaces/fashion-mnist-cnn.yaml] [--divisor 16] \\
    [--configs 0.1:0.9,0.3:0.9,1:0.9,3:0.9,2:0,6:0] [--json out.json]
    [--smoke]
"""

import argparse
import dataclasses
import json
import os
import platform
import time

from scipy import stats
import torch

from tan_tune.promote import scaling_law
from tan_tune.search import resolved as resolved_lib
from tan_tune.search import space as space_lib
from tan_tune.search import trial_record
from tan_tune.search import trials
from tan_tune.training import datasets
from tan_tune.training import trial
from tan_tune.training import trial_config


def _parse_configs(text: str) -> list[tuple[float, float]]:
  """'lr:momentum,...' as (lr, momentum) pairs; at least two, for a ranking."""
  try:
    pairs = [tuple(float(x) for x in item.split(":", 1))
             for item in text.split(",")]
  except ValueError:
    pairs = []
  if len(pairs) < 2 or any(len(p) != 2 for p in pairs):
    raise argparse.ArgumentTypeError(
        f"{text!r}: give at least two lr:momentum pairs, e.g. 1:0.9,4:0")
  return pairs


def _run(config: trial_config.TrialConfig, metric: str) -> tuple[float, float]:
  """(the final metric, the wall seconds) of one run."""
  start = time.perf_counter()
  result = trial.run_trial(config)
  return result.metrics[metric], time.perf_counter() - start


def _simulated(resolved, params) -> trial_config.TrialConfig:
  config = trial_record.build(resolved, params).config
  # Scored on test like the reference column, so the columns compare.
  return dataclasses.replace(config, validation_fraction=0.0)


def _machine(device: str) -> str:
  name = torch.cuda.get_device_name() if device.startswith("cuda") else (
      f"CPU, {torch.get_num_threads()} threads")
  return (f"{platform.machine()}, {os.cpu_count()} CPUs, python"
          f" {platform.python_version()}, torch {torch.__version__};"
          f" device {device} ({name})")


def main() -> None:
  parser = argparse.ArgumentParser(
      description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--space", default="search_spaces/fashion-mnist-cnn.yaml")
  parser.add_argument("--divisor", type=int, default=16,
                      help="k: the simulated column runs at B_ref / k")
  parser.add_argument("--configs", type=_parse_configs,
                      default="0.1:0.9,0.3:0.9,1:0.9,3:0.9,2:0,6:0",
                      help="lr:momentum pairs, comma-separated")
  parser.add_argument("--ema-decay", type=float, default=0.99)
  parser.add_argument("--json", help="also write the figures to this file")
  parser.add_argument("--steps", type=int,
                      help="override S in both columns (a quick check only)")
  parser.add_argument("--smoke", action="store_true",
                      help="digits (no download), two configurations, 2 steps:"
                      " a check that it runs")
  args = parser.parse_args()
  if args.smoke:
    args.space, args.steps = "search_spaces/digits-demo.yaml", 2
    args.configs = _parse_configs("1:0.9,2:0")

  space = space_lib.load_search_space(args.space)
  if args.steps:
    space = dataclasses.replace(space, eval_every=args.steps, reference=(
        dataclasses.replace(space.reference, steps=args.steps)))
  data = datasets.load_dataset(space.dataset)
  dataset_size = data.num_train
  resolved = resolved_lib.resolve(space, dataset_size)
  b_ref, k = space.reference.batch_size, args.divisor
  metric = space.metric
  configs = args.configs

  def params(lr, momentum, batch):
    return {"lr": lr, "momentum": momentum, "ema_decay": args.ema_decay,
            trials.SIMULATION_BATCH_SIZE: batch}

  device = space.device if space.device != "auto" else (
      "cuda" if torch.cuda.is_available() else "cpu")
  print(f"machine: {_machine(device)}")
  print(f"{space.name}: N = {dataset_size}, B_ref = {b_ref}, sigma_ref ="
        f" {space.reference.noise_multiplier}, S = {space.reference.steps};"
        f" simulated at B_ref / {k} = {b_ref // k}; metric {metric} on test")

  simulated = []
  for lr, momentum in configs:
    score, wall = _run(
        _simulated(resolved, params(lr, momentum, b_ref // k)),
        metric)
    simulated.append((score, wall))
    print(f"  B_ref/{k:<3} lr {lr:<5g} momentum {momentum:<4g}"
          f" {metric} {score:.4f}  {wall:6.1f} s", flush=True)
  reference = []
  for lr, momentum in configs:
    config = trial_record.build(
        resolved, params(lr, momentum, b_ref // k)).reference_run
    score, wall = _run(config, metric)
    reference.append((score, wall))
    print(f"  B_ref     lr {lr:<5g} momentum {momentum:<4g}"
          f" {metric} {score:.4f}  {wall:6.1f} s", flush=True)

  small = [s for s, _ in simulated]
  large = [s for s, _ in reference]
  picked = max(range(len(configs)), key=small.__getitem__)
  best = max(range(len(configs)), key=large.__getitem__)
  spearman = stats.spearmanr(small, large).statistic
  kendall = stats.kendalltau(small, large).statistic
  wall_ratio = sum(w for _, w in reference) / sum(w for _, w in simulated)

  # The scaling law through the picked configuration's simulated points.
  points = [(b_ref // k, small[picked])]
  for d in (4 * k, 2 * k):
    score, _ = _run(_simulated(resolved, params(*configs[picked], b_ref // d)),
                    metric)
    points.append((b_ref // d, score))
  fit = scaling_law.fit([b for b, _ in points], [a for _, a in points],
                        law=scaling_law.LOG_LINEAR)  # The figures recorded.
  low, high = fit.interval(b_ref)

  print(f"\n{'lr':>6} {'momentum':>8} {f'B_ref/{k}':>9} {'B_ref':>7}"
        f" {'rank /k':>8} {'rank B_ref':>10}")
  rank_small = stats.rankdata([-s for s in small], method="min")
  rank_large = stats.rankdata([-s for s in large], method="min")
  for i, (lr, momentum) in enumerate(configs):
    print(f"{lr:>6g} {momentum:>8g} {small[i]:>9.4f} {large[i]:>7.4f}"
          f" {int(rank_small[i]):>8} {int(rank_large[i]):>10}")
  print(f"Spearman rank correlation {spearman:.3f}, Kendall tau {kendall:.3f}")
  print(f"best at B_ref/{k}: lr {configs[picked][0]:g} momentum"
        f" {configs[picked][1]:g}; best at B_ref: lr {configs[best][0]:g}"
        f" momentum {configs[best][1]:g}; same: {picked == best}")
  print(f"regret at B_ref of the pick: {large[best] - large[picked]:.4f}")
  print(f"compute, B_ref column / B_ref/{k} column: {k:.2f}x in examples,"
        f" {wall_ratio:.2f}x in wall time")
  print("scaling law for the pick, fitted on "
        + ", ".join(f"B={b}: {a:.4f}" for b, a in points)
        + f": predicts {fit.predict(b_ref):.4f} (90% interval {low:.4f} to"
        f" {high:.4f}) at B_ref; actual {large[picked]:.4f}")

  if args.json:
    with open(args.json, "w") as f:
      json.dump({
          "space": space.name, "divisor": k, "metric": metric,
          "configs": [{"lr": lr, "momentum": m, "simulated": small[i],
                       "reference": large[i],
                       "simulated_seconds": simulated[i][1],
                       "reference_seconds": reference[i][1]}
                      for i, (lr, m) in enumerate(configs)],
          "spearman": spearman, "kendall": kendall,
          "same_best": picked == best,
          "regret": large[best] - large[picked],
          "wall_ratio": wall_ratio,
          "scaling_points": points,
          "prediction": fit.predict(b_ref), "interval": [low, high],
          "actual": large[picked],
      }, f, indent=2)


if __name__ == "__main__":
  main()
