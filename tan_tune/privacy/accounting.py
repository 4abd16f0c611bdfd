"""Epsilon of a privacy triplet, and the inverse questions.

Every epsilon here is for DP-SGD with Poisson sampling at rate q = B / N and
add/remove-one adjacency, composed over S steps. Three accountants:

* `rdp` (default, the TAN paper's): Opacus' Renyi DP of the sampled Gaussian,
  converted to (eps, delta) with Balle et al. 2020, theorem 21;
* `prv`: Opacus' privacy random variables (Gopi et al. 2021), tighter;
* `pld`: dp_accounting's privacy loss distributions, tighter.

A search asks the same question many times, so results are memoised on
(q, sigma, S, delta, accountant), and the RDP of one step is memoised on
(q, sigma) so that questions about S cost one conversion each.
"""

import dataclasses
import functools
import math
from typing import Callable
import warnings

from dp_accounting import dp_event
from dp_accounting import pld
import numpy as np
from opacus.accountants import PRVAccountant
from opacus.accountants.analysis import rdp
from scipy import optimize

from tan_tune.errors import ConfigError
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.privacy.triplet import PrivacyTriplet, require_delta

ACCOUNTANTS = ("rdp", "prv", "pld")
ADJACENCY = "add/remove-one"
SAMPLING = "Poisson sampling at q = B/N"
# The noise multipliers calibrate_sigma searches; beyond them no useful run lies.
SIGMA_RANGE = (0.1, 1000.0)
# max_steps stops looking past this many steps.
STEPS_LIMIT = 10**9
# Orders of the Renyi divergence: Opacus' defaults, extended for large sigma.
_RDP_ORDERS = tuple(
    [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)) + [80, 128, 256]
)
# Relative precision of calibrate_sigma; the result is rounded up to it.
_SIGMA_RTOL = 1e-4


@dataclasses.dataclass(frozen=True)
class EpsilonReport:
  """An epsilon together with what it is an epsilon of.

  Attributes:
    epsilon: the privacy budget spent.
    delta: the delta it is paired with.
    accountant: one of ACCOUNTANTS.
    adjacency: the neighbouring relation the guarantee is for.
    sampling: how batches are drawn.
  """

  epsilon: float
  delta: float
  accountant: str
  adjacency: str = ADJACENCY
  sampling: str = SAMPLING

  def describe(self) -> str:
    return (
        f"eps = {self.epsilon:.3f} at delta = {self.delta:.3g}"
        f" ({self.accountant.upper()} accountant, {self.adjacency} adjacency,"
        f" {self.sampling})"
    )


def default_delta(dataset_size: int) -> float:
  """delta = 1 / N, the paper's choice (section 4.1)."""
  return 1.0 / dataset_size


def epsilon(
    triplet: PrivacyTriplet,
    delta: float | None = None,
    accountant: str = "rdp",
) -> EpsilonReport:
  """The (eps, delta)-DP guarantee of DP-SGD run at `triplet`.

  Args:
    triplet: (N, B, sigma, S); q = B / N.
    delta: defaults to 1 / N.
    accountant: one of ACCOUNTANTS.
  """
  delta = default_delta(triplet.dataset_size) if delta is None else delta
  require_delta(delta)
  _require_accountant(accountant)
  value = _epsilon(
      triplet.sampling_rate,
      float(triplet.noise_multiplier),
      triplet.steps,
      delta,
      accountant,
  )
  return EpsilonReport(epsilon=value, delta=delta, accountant=accountant)


def composed_epsilon(
    triplets: list[PrivacyTriplet], delta: float
) -> EpsilonReport:
  """The guarantee of several runs on the same data, with RDP.

  Renyi DP composes by addition at every order alpha,

      RDP_total(alpha) = sum_r S_r RDP_step(alpha; q_r, sigma_r),

  and the total is converted to (eps, delta) once, so n runs cost far less
  than n times the eps of one. With one triplet it is `epsilon(..., 'rdp')`.
  """
  require_delta(delta)
  if not triplets:
    return EpsilonReport(epsilon=0.0, delta=delta, accountant="rdp")
  total = sum(_rdp_per_step(t.sampling_rate, float(t.noise_multiplier))
              * t.steps for t in triplets)
  return EpsilonReport(epsilon=_rdp_to_epsilon(total, delta), delta=delta,
                       accountant="rdp")


def calibrate_sigma(
    dataset_size: int,
    batch_size: int,
    steps: int,
    target_epsilon: float,
    delta: float | None = None,
    accountant: str = "rdp",
) -> float:
  """The smallest sigma whose run spends at most `target_epsilon`.

  eps decreases with sigma, so this is a root of eps(sigma) = target. The
  search starts from the sigma that eps_TAN predicts (eq. 4 solved for eta),
  which is close to the root whenever sigma > 2, so few accountant calls are
  needed. The result is rounded up by a relative 1e-4, never down.

  Raises:
    ConfigError: the target is not a positive number, or no sigma in
      SIGMA_RANGE reaches it.
  """
  _require_positive_number("target_epsilon", target_epsilon)
  delta = default_delta(dataset_size) if delta is None else delta

  def eps_of(sigma: float) -> float:
    return epsilon(
        PrivacyTriplet(dataset_size, batch_size, sigma, steps),
        delta,
        accountant,
    ).epsilon

  low, high = SIGMA_RANGE
  guess = _sigma_from_eps_tan(
      batch_size / dataset_size, steps, target_epsilon, delta
  )
  # log(eps) is close to linear in log(sigma): search there.
  def gap(log_sigma: float) -> float:
    return math.log(eps_of(math.exp(log_sigma))) - math.log(target_epsilon)

  bracket = _bracket(gap, math.log(guess), math.log(low), math.log(high))
  if bracket is None:
    raise ConfigError(
        "target_epsilon",
        target_epsilon,
        f"no sigma in [{low:g}, {high:g}] reaches it: with N = {dataset_size},"
        f" B = {batch_size}, S = {steps}, delta = {delta:.3g} and the"
        f" {accountant} accountant, eps ranges over [{eps_of(high):.4g},"
        f" {eps_of(low):.4g}]",
    )
  root = optimize.brentq(gap, *bracket, xtol=_SIGMA_RTOL / 4)
  sigma = math.exp(root) * (1 + _SIGMA_RTOL / 2)
  # brentq's root may sit a hair on the wrong side: step up until it holds.
  while eps_of(sigma) > target_epsilon:
    sigma *= 1 + _SIGMA_RTOL
  return sigma


def max_steps(
    dataset_size: int,
    batch_size: int,
    noise_multiplier: float,
    target_epsilon: float,
    delta: float | None = None,
    accountant: str = "rdp",
) -> int:
  """The largest S whose run spends at most `target_epsilon`.

  Raises:
    ConfigError: even one step exceeds the target, or the target is not
      reached within STEPS_LIMIT steps.
  """
  _require_positive_number("target_epsilon", target_epsilon)
  delta = default_delta(dataset_size) if delta is None else delta

  def fits(steps: int) -> bool:
    triplet = PrivacyTriplet(dataset_size, batch_size, noise_multiplier, steps)
    return epsilon(triplet, delta, accountant).epsilon <= target_epsilon

  if not fits(1):
    raise ConfigError(
        "target_epsilon",
        target_epsilon,
        f"a single step at sigma = {noise_multiplier:g} already exceeds it;"
        " raise sigma or the target",
    )
  good, bad = 1, 2
  while fits(bad):
    good, bad = bad, bad * 2
    if bad > STEPS_LIMIT:
      raise ConfigError(
          "target_epsilon",
          target_epsilon,
          f"not reached within {STEPS_LIMIT} steps: it does not bound S",
      )
  while bad - good > 1:
    middle = (good + bad) // 2
    good, bad = (middle, bad) if fits(middle) else (good, middle)
  return good


def _sigma_from_eps_tan(
    q: float, steps: int, target_epsilon: float, delta: float
) -> float:
  """Solves eps_TAN(eta) = target for eta, then eta for sigma."""
  eta = triplet_lib.eta_for_eps_tan(target_epsilon, delta)
  guess = q * math.sqrt(steps / 2.0) / eta
  return min(max(guess, SIGMA_RANGE[0]), SIGMA_RANGE[1])


def _bracket(
    gap: Callable[[float], float], start: float, low: float, high: float
) -> tuple[float, float] | None:
  """An interval [a, b] within [low, high] holding a sign change of `gap`.

  `gap` decreases; the interval grows geometrically around `start`.
  """
  width = 0.05
  a, b = max(low, start - width), min(high, start + width)
  while True:
    gap_a, gap_b = gap(a), gap(b)
    if gap_a >= 0 >= gap_b:
      return a, b
    if (gap_a < 0 and a == low) or (gap_b > 0 and b == high):
      return None
    width *= 4
    if gap_a < 0:
      a, b = max(low, a - width), a
    else:
      a, b = b, min(high, b + width)


@functools.lru_cache(maxsize=65536)
def _epsilon(
    q: float, sigma: float, steps: int, delta: float, accountant: str
) -> float:
  if accountant == "rdp":
    return _rdp_epsilon(q, sigma, steps, delta)
  if accountant == "prv":
    return _prv_epsilon(q, sigma, steps, delta)
  return _pld_epsilon(q, sigma, steps, delta)


@functools.lru_cache(maxsize=4096)
def _rdp_per_step(q: float, sigma: float) -> np.ndarray:
  return np.asarray(
      rdp.compute_rdp(
          q=q, noise_multiplier=sigma, steps=1, orders=list(_RDP_ORDERS)
      )
  )


def _rdp_epsilon(q: float, sigma: float, steps: int, delta: float) -> float:
  return _rdp_to_epsilon(_rdp_per_step(q, sigma) * steps, delta)


def _rdp_to_epsilon(total: np.ndarray, delta: float) -> float:
  with warnings.catch_warnings():
    # At extreme sigma the best order is at an end of _RDP_ORDERS: far past
    # the wall (simulated runs, eps astronomical and said to be meaningless)
    # or far above it (eps tiny). The bound stays a valid upper bound.
    warnings.filterwarnings("ignore", message="Optimal order is the")
    value, _ = rdp.get_privacy_spent(
        orders=list(_RDP_ORDERS),
        rdp=total,
        delta=delta,
    )
  return float(value)


def _prv_epsilon(q: float, sigma: float, steps: int, delta: float) -> float:
  accountant = PRVAccountant()
  accountant.history = [(sigma, q, steps)]
  return float(accountant.get_epsilon(delta=delta))


def _pld_epsilon(q: float, sigma: float, steps: int, delta: float) -> float:
  event = dp_event.SelfComposedDpEvent(
      dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps
  )
  accountant = pld.PLDAccountant()
  accountant.compose(event)
  return float(accountant.get_epsilon(delta))


def _require_accountant(accountant: str) -> None:
  if accountant not in ACCOUNTANTS:
    raise ConfigError(
        "accountant", accountant, f"expected one of {', '.join(ACCOUNTANTS)}"
    )


def _require_positive_number(field: str, value: float) -> None:
  if not (
      isinstance(value, (int, float)) and math.isfinite(value) and value > 0
  ):
    raise ConfigError(field, value, "expected a finite number > 0")
