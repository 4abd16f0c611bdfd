"""The four samplers side by side on one (N, B, sigma, S).

The Fashion-MNIST reference run of `search_spaces/fashion-mnist-cnn.yaml`
(N = 60,000, B = 4096, sigma = 2.662, S = 600, delta = 1e-5) unless told
otherwise. In one run:

1. privacy: eps of each sampler under each adjacency and accountant, the
   sigma each needs for the eps Poisson spends (RDP), and the eta-law ratio
   (eps at B/2, sigma/2 over eps at B, sigma; `privacy/comparison.py`);
2. cost: 50 real DP-SGD steps of the space's CNN (fast clipping, K = 1, the
   whole logical batch as one micro-batch, as on a GPU that fits it) under
   each sampler, each in its own process and taking turns step by step;
   per step its time and the peak resident memory above what the process
   held before it (VmHWM reset through /proc/self/clear_refs), then median,
   spread and peak over the steps;
3. variance: of the noise-free clipped mean gradient sum_i w_i c_i / B at the
   initial weights, measured over --draws batches, beside its exact value
   from the per-example clipped gradients c_i of all N examples (one pass):
       Poisson      q (1 - q) sum |c_i|^2 / B^2
       FSwoR        B (N - B) / (N (N - 1)) (sum |c_i|^2 - N |c_bar|^2) / B^2
       FSwR         B (sum |c_i|^2 / N - |c_bar|^2) / B^2
   Birrell et al. report lower variance for fixed-size batches; Poisson's
   excess is the N q (1 - q) |c_bar|^2 term: the batch's size varies too.

Needs the Fashion-MNIST files (`apt-get install dataset-fashion-mnist`).
Run: .venv/bin/python benchmarks/sampling.py [--batch-size 4096] [--steps 50]
     [--draws 100] [--smoke]
"""

import argparse
import datetime
import statistics
import subprocess
import sys
import time

import torch

import dp_step  # benchmarks/dp_step.py: the memory probes.
from tan_tune.privacy import accounting
from tan_tune.privacy import comparison
from tan_tune.privacy import samplers
from tan_tune.privacy.sampling_scheme import SamplingScheme
from tan_tune.privacy.triplet import PrivacyTriplet
from tan_tune.training import datasets
from tan_tune.training import fast_clipping
from tan_tune.training import sampling
from tan_tune.training.dp_sgd import DPSGD
from tan_tune.training.models import ModelConfig, build_model

DATASET = datasets.DatasetConfig("fashion-mnist")
# Fashion-MNIST's shape without its files, for --smoke.
SMOKE_DATASET = datasets.DatasetConfig(
    "synthetic", image_size=28, channels=1, num_classes=10, train_size=1024,
    test_size=16)
MODEL = ModelConfig("dp-cnn")
SIGMA, STEPS, DELTA = 2.662, 600, 1e-5


class _Setup:
  """The data, a model at its initial weights, and a batch loader."""

  def __init__(self, dataset: datasets.DatasetConfig, seed: int = 0):
    data = datasets.load_dataset(dataset)
    self.train, self.n = data.train, data.num_train
    self.mean, self.std = data.mean[0], data.std[0]
    torch.manual_seed(seed)
    self.model = build_model(MODEL, data.input_shape, data.num_classes)

  def micro_batch(self, batch: sampling.LogicalBatch):
    """(images [b, K = 1, C, H, W] normalised, labels, weights)."""
    images, labels = self.train.get_batch(batch.indices)
    return ((images.unsqueeze(1) - self.mean) / self.std, labels,
            batch.weights)


def _worker(sampler: str, batch_size: int,
            dataset: datasets.DatasetConfig) -> None:
  """Subprocess mode: one DP step per line read; answers seconds, bytes and
  the rows drawn (padding left out)."""
  setup = _Setup(dataset)
  dp = DPSGD(setup.model, torch.optim.SGD(setup.model.parameters(), lr=1.0),
             clip_norm=1.0, noise_multiplier=SIGMA,
             expected_batch_size=batch_size,
             generator=torch.Generator().manual_seed(0), clipping="fast")
  draw = sampling.Sampler(SamplingScheme(sampler), setup.n, batch_size,
                          torch.Generator().manual_seed(1))
  print(flush=True)  # Ready.
  for _ in sys.stdin:
    in_use = dp_step.reset_peak(torch.device("cpu"))
    start = time.perf_counter()
    stats = dp.step([setup.micro_batch(draw.sample())])
    print(time.perf_counter() - start,
          dp_step.peak(torch.device("cpu")) - in_use, stats.examples,
          flush=True)


def _costs(batch_size: int, steps: int,
           smoke: bool) -> dict[str, tuple[list, list, list]]:
  workers = {
      s: subprocess.Popen([sys.executable, __file__, "--worker", s,
                           "--batch-size", str(batch_size),
                           *(["--smoke"] if smoke else [])],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True)
      for s in samplers.registered()}
  results = {s: ([], [], []) for s in workers}
  try:
    for worker in workers.values():
      worker.stdout.readline()
    for step in range(steps + 2):  # 2 warm-up steps.
      for sampler, worker in workers.items():
        worker.stdin.write("\n")
        worker.stdin.flush()
        seconds, memory, rows = worker.stdout.readline().split()
        if step >= 2:
          results[sampler][0].append(float(seconds))
          results[sampler][1].append(int(memory))
          results[sampler][2].append(int(rows))
  finally:
    for worker in workers.values():
      worker.stdin.close()
      worker.wait()
  return results


def _variances(batch_size: int, draws: int,
               dataset: datasets.DatasetConfig
               ) -> dict[str, tuple[float, float]]:
  """Measured and exact variance of the noise-free clipped mean gradient."""
  setup = _Setup(dataset)
  whole = sampling.LogicalBatch(torch.arange(setup.n))
  total, squares = None, 0.0
  for chunk in sampling.micro_batches(whole, 4096):
    images, labels, _ = setup.micro_batch(chunk)
    result = fast_clipping.clipped_sum(setup.model, images, labels, 1.0)
    flat = torch.cat([g.flatten() for g in result.gradients.values()])
    total = flat if total is None else total + flat
    squares += float(result.norms.clamp(max=1.0).pow(2).sum())
  n, b = setup.n, batch_size
  q, mean_sq = b / n, float((total / n).pow(2).sum())
  exact = {
      "poisson": q * (1 - q) * squares / b**2,
      "fixed": b * (n - b) / (n * (n - 1)) * (squares - n * mean_sq) / b**2,
      "fixed-with-replacement": b * (squares / n - mean_sq) / b**2,
  }
  measured = {}
  for sampler in samplers.registered():
    draw = sampling.Sampler(SamplingScheme(sampler), n, b,
                            torch.Generator().manual_seed(2))
    means = []
    for _ in range(draws):
      images, labels, weights = setup.micro_batch(draw.sample())
      result = fast_clipping.clipped_sum(setup.model, images, labels, 1.0,
                                         weights)
      means.append(torch.cat([g.flatten()
                              for g in result.gradients.values()]) / b)
    stacked = torch.stack(means)
    measured[sampler] = (float((stacked - stacked.mean(0)).pow(2).sum(1)
                               .mean() * draws / (draws - 1)),
                         exact.get(sampler, float("nan")))
  return measured


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--batch-size", type=int, default=4096)
  parser.add_argument("--steps", type=int, default=50)
  parser.add_argument("--draws", type=int, default=100)
  parser.add_argument("--worker")
  parser.add_argument("--smoke", action="store_true",
                      help="synthetic data of Fashion-MNIST's shape (N = 1024),"
                      " B = 2, one step, two draws: a check that it runs")
  args = parser.parse_args()
  dataset = SMOKE_DATASET if args.smoke else DATASET
  if args.smoke and not args.worker:
    # B = 2: fixed-with-replacement's RDP, evaluated at each sigma its
    # calibration tries, sums over min(B, 8) draw counts (tens of seconds
    # at B = 64).
    args.batch_size, args.steps, args.draws = 2, 1, 2
  if args.worker:
    _worker(args.worker, args.batch_size, dataset)
    return
  n = datasets.load_dataset(dataset).num_train
  triplet = PrivacyTriplet(n, args.batch_size, SIGMA, STEPS)
  print(f"{datetime.date.today()}; N = {n:,}, B = {args.batch_size:,},"
        f" sigma = {SIGMA}, S = {STEPS}, delta = {DELTA}")
  target = accounting.epsilon(triplet, DELTA).epsilon
  print(f"\n1. privacy (sigma for eps = {target:.3f}, Poisson's RDP eps):")
  print(f"  {'sampler':<23} {'adjacency':<15} {'accountant':<10}"
        f" {'eps':>10}")
  rows = comparison.compare_samplers(triplet, DELTA, samplers.registered(),
                                     target)
  for row in rows:
    for (adjacency, name), eps in row.epsilons.items():
      print(f"  {row.sampler:<23} {adjacency:<15} {name:<10} {eps:10.4g}")
    if row.rdp_floor is not None:
      print(f"  {row.sampler:<23} {'add/remove-one':<15} {'RDP floor':<10}"
            f" {row.rdp_floor:10.4g}")
  poisson_pld = accounting.calibrate_sigma(n, args.batch_size, STEPS, target,
                                          DELTA, "pld")
  print(f"  (each with its default accountant; Poisson with PLD needs"
        f" {poisson_pld:.4f})")
  for row in rows:
    sigma = (f"{row.sigma_for_target:.4f}" if row.sigma_for_target
             else "not reachable")
    print(f"  {row.sampler:<23} sigma needed {sigma:>13}"
          f" ({(row.sigma_for_target or float('nan')) / SIGMA:.2f}x);"
          f" eta-law ratio {row.eta_law_ratio:.3f}")

  print(f"\n2. cost of {args.steps} DP steps (CNN, one micro-batch per step):")
  print(f"  {'sampler':<23} {'rows':>6} {'drawn':>11} {'median ms':>10}"
        f" {'ms spread':>10} {'peak MiB':>9} {'MiB spread':>11}")
  costs = _costs(args.batch_size, args.steps, args.smoke)
  base = statistics.median(costs["poisson"][0])
  for sampler, (seconds, memory, drawn) in costs.items():
    cap = SamplingScheme(sampler).cap(args.batch_size)
    print(f"  {sampler:<23} {cap or 'drawn':>6}"
          f" {min(drawn):>5}-{max(drawn):<5}"
          f" {1e3 * statistics.median(seconds):10.1f}"
          f" {1e3 * (max(seconds) - min(seconds)):10.1f}"
          f" {max(memory) / 2**20:9.1f}"
          f" {(max(memory) - min(memory)) / 2**20:11.1f}"
          f"   time x{statistics.median(seconds) / base:.3f} of Poisson")

  print(f"\n3. variance of the noise-free clipped mean gradient"
        f" ({args.draws} draws):")
  variances = _variances(args.batch_size, args.draws, dataset)
  reference = variances["poisson"][1]
  for sampler, (measured, exact) in variances.items():
    # A variance estimate from d draws has relative s.e. about sqrt(2/(d-1)).
    error = measured * (2 / (args.draws - 1)) ** 0.5
    exact_text = (f"exact {exact:.4e} (x{exact / reference:.4f} of Poisson)"
                  if exact == exact else "exact: Poisson's while the cap"
                  " does not bind")
    print(f"  {sampler:<23} measured {measured:.4e} +- {error:.1e};"
          f" {exact_text}")


if __name__ == "__main__":
  main()
