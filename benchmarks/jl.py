"""JL-projection clipping against exact clipping: cost, epsilon, accuracy.

In one run, side by side:

1. cost: time and peak memory of one DP-SGD step with JL clipping at
   r in {1, 4, 10, 32} projections, exact clipping (the fast engine and
   per-sample gradients by vmap) and the non-private step, on the
   Fashion-MNIST CNN (dp-cnn) and WRN-16-4, as ratios to the non-private
   step (`dp_step.py`'s turn-taking subprocesses);
2. epsilon: JL's accountant (`pld-jl`) at r in {4, 10, 32, 100} beside exact
   clipping on the same PLD grid, Poisson RDP, and JL's floor (no accountant
   can certify less, at any S), for the TAN CIFAR-10 and ImageNet references
   and the JL seed paper's own MNIST setting (N = 60,000, B = 256,
   sigma = 1.3, 5 epochs, delta = 1e-5);
3. accuracy at the same eps: on Fashion-MNIST, sigma_ref calibrated so that
   the space's reference (B_ref = 4096, S = 600) spends exactly --epsilon
   with each method's accountant (PLD for exact clipping, PLD-JL for JL at
   each r), then the TAN simulation of that reference at B_ref / 16 trained
   with the transfer benchmark's best (lr 6, momentum 0, EMA 0.99), scored
   on the test split. Simulated runs are not private: they predict what the
   reference runs would reach (`benchmarks/transfer.py` measured that
   prediction within 0.6 points on this space).

Needs the Fashion-MNIST files for part 3 (`apt-get install
dataset-fashion-mnist`). About 40 minutes on 2 CPU cores.
Run: .venv/bin/python benchmarks/jl.py [--parts cost,epsilon,accuracy]
     [--projections 10,32] [--epsilon 3] [--smoke]
"""

import argparse
import dataclasses
import datetime
import math
import pathlib
import subprocess
import sys
import time

from tan_tune.privacy import accounting
from tan_tune.privacy import clipping_bound
from tan_tune.privacy import jl_accounting
from tan_tune.privacy.clipping_bound import JlBound
from tan_tune.privacy.sampling_scheme import SamplingScheme
from tan_tune.privacy.triplet import PrivacyTriplet
from tan_tune.search import resolved as resolved_lib
from tan_tune.search import space as space_lib
from tan_tune.search import trial_record
from tan_tune.search import trials
from tan_tune.training import datasets
from tan_tune.training import trial

HERE = pathlib.Path(__file__).resolve().parent
SPACE = HERE.parent / "search_spaces" / "fashion-mnist-cnn.yaml"
EPS_PROJECTIONS = (4, 10, 32, 100)
# (name, N, B, sigma, S, delta)
SETTINGS = (
    ("TAN CIFAR-10", 50_000, 4096, 3.0, 2500, 1e-5),
    ("TAN ImageNet", 1_281_167, 32_768, 2.5, 18_000, 8e-7),
    ("seed's MNIST", 60_000, 256, 1.3, math.ceil(5 * 60_000 / 256), 1e-5),
)
BEST = {"lr": 6.0, "momentum": 0.0, "ema_decay": 0.99}


def cost(smoke: bool) -> None:
  # dp_step.py's own smoke run times the exact methods at this size.
  methods = ("tan_tune-jl1" if smoke else "tan_tune-fast,tan_tune-vmap,"
             + ",".join(f"tan_tune-jl{r}" for r in (1, 4, 10, 32)))
  sizes = ["--models", "dp-cnn", "--configs", "8x1", "--warmup", "1",
           "--repeats", "1"] if smoke else [
               "--models", "dp-cnn,wrn-16-4", "--configs", "32x1,128x1"]
  subprocess.run([sys.executable, str(HERE / "dp_step.py"), *sizes,
                  "--methods", methods], check=True)


def epsilon(smoke: bool) -> None:
  # The seed's MNIST at r = 4 only: its S and grid are the smallest here.
  settings, projections = (SETTINGS[2:], (4,)) if smoke else (
      SETTINGS, EPS_PROJECTIONS)
  print(f"\n{'setting':<13} {'RDP exact':>9} {'PLD exact':>9}"
        + "".join(f" {f'r={r}':>8}" for r in projections)
        + "   floor at r = " + ", ".join(map(str, (1,) + projections)))
  for name, n, b, sigma, steps, delta in settings:
    start = time.perf_counter()
    triplet = PrivacyTriplet(n, b, sigma, steps)
    rdp = accounting.epsilon(triplet, delta, "rdp").epsilon
    exact = jl_accounting.composed_epsilon(
        ((b / n, sigma, steps, None),), delta)
    jl = [accounting.epsilon(triplet, delta, "pld-jl",
                             SamplingScheme(bound=JlBound(r))).epsilon
          for r in projections]
    floors = [jl_accounting.jl_floor(b / n, sigma, delta, r)
              for r in (1,) + projections]
    print(f"{name:<13} {rdp:9.3f} {exact:9.3f}"
          + "".join(f" {e:8.3f}" if math.isfinite(e) else f" {'none':>8}"
                    for e in jl)
          + "   " + ", ".join(f"{f:.4g}" for f in floors)
          + f"  ({time.perf_counter() - start:.0f} s)", flush=True)
  print("none: no finite eps (Z_r's tail needs sensitivities above"
        f" {jl_accounting.MAX_CAP:g} C); floors hold for any S.")
  # Each bisection is a floor at r = 1, seconds: --smoke takes one.
  _seed_claim(bisections=1 if smoke else 60)


def _seed_claim(bisections: int) -> None:
  """The seed's r = 1 MNIST claim (eps 2.4) against one step's delta."""
  _, n, b, sigma, _, delta = SETTINGS[2]
  one_step = _one_step_delta(b / n, sigma, 2.4, 1, bisections)
  print(f"seed's claim, r = 1 on MNIST, eps 2.4 at delta {delta:g}: one step"
        f" alone has delta(2.4) >= {one_step:.3g}"
        f" ({one_step / delta:.0f}x the claimed delta)")


def _one_step_delta(q: float, sigma: float, eps: float, r: int,
                    bisections: int) -> float:
  """The least delta at which the floor (an eps for a given delta, falling
  in delta) is at most `eps`: bisected on a log scale."""
  low, high = 1e-12, 1.0
  for _ in range(bisections):
    middle = math.sqrt(low * high)
    if jl_accounting.jl_floor(q, sigma, middle, r) > eps:
      low = middle
    else:
      high = middle
  return low


def accuracy(projections: list[int], target: float,
             steps: int | None, smoke: bool) -> None:
  space = space_lib.load_search_space(SPACE)
  if smoke:  # Fashion-MNIST's shape, without its files, at B_ref = 256.
    space = dataclasses.replace(space, dataset=datasets.DatasetConfig(
        "synthetic", image_size=28, channels=1, num_classes=10,
        train_size=1024, test_size=128), simulation_batch_sizes=(16,),
        reference=dataclasses.replace(space.reference, batch_size=256))
  if steps:
    space = dataclasses.replace(space, reference=dataclasses.replace(
        space.reference, steps=steps))
  data = datasets.load_dataset(space.dataset)
  n = data.num_train
  ref = space.reference
  divisor = 16
  print(f"\n{space.dataset.name}, reference B_ref = {ref.batch_size},"
        f" S = {ref.steps},"
        f" eps = {target:g} at delta = {ref.delta or 1 / n:g}; simulated at"
        f" B = {ref.batch_size // divisor}, {BEST}, EMA accuracy on test")
  print(f"{'clipping':<10} {'accountant':<10} {'sigma_ref':>9} {'accuracy':>9}"
        f" {'wall s':>7}")
  for r in [None, *projections]:
    scheme = SamplingScheme(bound=clipping_bound.from_projections(r))
    accountant = "pld" if r is None else "pld-jl"
    sigma = accounting.calibrate_sigma(n, ref.batch_size, ref.steps, target,
                                       ref.delta, accountant, scheme)
    run_space = dataclasses.replace(
        space, clipping="jl" if r else "auto", jl_projections=r,
        hyperparameters={"lr": space.hyperparameters["lr"]},
        reference=dataclasses.replace(ref, noise_multiplier=sigma,
                                      target_epsilon=None))
    config = trial_record.build(
        resolved_lib.resolve(run_space, n),
        {**BEST, trials.SIMULATION_BATCH_SIZE: ref.batch_size // divisor}
    ).config
    config = dataclasses.replace(config, validation_fraction=0.0,
                                 eval_every=ref.steps)
    start = time.perf_counter()
    metrics = trial.run_trial(config).metrics
    print(f"{'exact' if r is None else f'JL r={r}':<10} {accountant:<10}"
          f" {sigma:9.4f} {metrics['ema_accuracy']:9.4f}"
          f" {time.perf_counter() - start:7.0f}", flush=True)


def main() -> None:
  parser = argparse.ArgumentParser(
      description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--parts", default="cost,epsilon,accuracy")
  parser.add_argument("--projections", default="10,32",
                      help="JL's r for the accuracy part")
  parser.add_argument("--epsilon", type=float, default=3.0,
                      help="the eps every accuracy run's reference spends")
  parser.add_argument("--steps", type=int,
                      help="override S (a quick check only)")
  parser.add_argument("--smoke", action="store_true",
                      help="dp-cnn at B = 8 with r = 1 only, one eps setting"
                      " at r = 4, the seed's claim bisected once, accuracy"
                      " on synthetic data for 2 steps with r = 10 at eps"
                      " 0.03: a check that it runs")
  args = parser.parse_args()
  if args.smoke:
    # At eps 0.03, sigma_ref and the simulated run's sigma are large and
    # PLD-JL's mixtures narrow: its calibration, and the run's own eps, take
    # seconds, not the minutes they take at eps 3.
    args.projections, args.steps, args.epsilon = "10", 2, 0.03
  print(f"date: {datetime.date.today()}")
  parts = args.parts.split(",")
  if "cost" in parts:
    cost(args.smoke)
  if "epsilon" in parts:
    epsilon(args.smoke)
  if "accuracy" in parts:
    accuracy([int(r) for r in args.projections.split(",")], args.epsilon,
             args.steps, args.smoke)


if __name__ == "__main__":
  main()
