"""Time one eps evaluation and one sigma calibration per accountant.

The TAN paper's ImageNet run: N = 1,281,167, B = 16,384, sigma = 2.5,
S = 72,000, delta = 8e-7. Every timing is taken in this one process, side by
side: a cold call (caches cleared) for each accountant, Opacus' own
`get_noise_multiplier` as the baseline calibration, and tan_tune's cached path
(the same question asked again, as a search does).

Run: .venv/bin/python benchmarks/accounting.py [--smoke]
"""

import argparse
import platform
import time

from opacus.accountants.utils import get_noise_multiplier

from tan_tune.privacy import accounting
from tan_tune.privacy import mechanisms
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.privacy.sampling_scheme import POISSON

N, B, SIGMA, S, DELTA, TARGET = 1281167, 16384, 2.5, 72000, 8e-7, 8.0


def _clear_caches() -> None:
  accounting._epsilon.cache_clear()  # pylint: disable=protected-access
  mechanisms.poisson_rdp.cache_clear()


def _seconds(call, repeats: int = 1) -> float:
  """Best of `repeats` cold calls."""
  best = float("inf")
  for _ in range(repeats):
    _clear_caches()
    start = time.perf_counter()
    call()
    best = min(best, time.perf_counter() - start)
  return best


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--smoke", action="store_true",
                      help="S = 72, target eps 0.3, one repeat: a check that"
                      " it runs")
  args = parser.parse_args()
  # Calibration is quick where the target is near the reference's eps
  # (about 0.2 at S = 72) and slow towards the privacy wall.
  steps, target, repeats, cached_repeats = (
      (72, 0.3, 1, 10) if args.smoke else (S, TARGET, 3, 1000))
  reference = triplet_lib.PrivacyTriplet(N, B, SIGMA, steps)
  print(f"machine: {platform.processor() or platform.machine()},"
        f" python {platform.python_version()}")
  print(f"triplet: N={N} B={B} sigma={SIGMA} S={steps} delta={DELTA}")
  print(f"{'accountant':<10} {'eps':>7} {'eps (s)':>9} {'calibrate (s)':>14}"
        f" {'opacus calibrate (s)':>21}")
  for name in POISSON.accountants:
    eps = accounting.epsilon(reference, DELTA, name).epsilon
    eps_time = _seconds(lambda: accounting.epsilon(reference, DELTA, name),
                        repeats)
    calibrate_time = _seconds(
        lambda: accounting.calibrate_sigma(N, B, steps, target, DELTA, name)
    )
    if name == "pld":
      opacus = "n/a"  # Opacus has no PLD accountant.
    else:
      start = time.perf_counter()
      get_noise_multiplier(
          target_epsilon=target, target_delta=DELTA, sample_rate=B / N,
          steps=steps, accountant=name,
      )
      opacus = f"{time.perf_counter() - start:.3f}"
    print(f"{name:<10} {eps:7.3f} {eps_time:9.4f} {calibrate_time:14.3f}"
          f" {opacus:>21}")
  accounting.calibrate_sigma(N, B, steps, target, DELTA)
  start = time.perf_counter()
  for _ in range(cached_repeats):
    accounting.epsilon(reference, DELTA)
    accounting.calibrate_sigma(N, B, steps, target, DELTA)
  cached = (time.perf_counter() - start) / cached_repeats
  print(f"cached eps + calibration (rdp), same question again: {cached * 1e6:.1f} us")


if __name__ == "__main__":
  main()
