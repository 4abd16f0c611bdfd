"""Epsilon of a privacy triplet, and the inverse questions.

Every epsilon is for DP-SGD composed over S steps under a `SamplingScheme`
(a sampler and an adjacency; Poisson at q = B / N with add/remove-one by
default) and names both, with its accountant:

* `rdp` (default, the TAN paper's): Renyi DP converted to (eps, delta) with
  Balle et al. 2020, theorem 21: the exact RDP of the
  Poisson-subsampled Gaussian (Mironov et al. 2019) for Poisson,
  Birrell et al. 2024 for fixed-size batches (`fixed_size.py`);
* `prv`: Opacus' privacy random variables (Gopi et al. 2021), Poisson only;
* `pld`: dp_accounting's privacy loss distributions, Poisson and truncated
  Poisson;
* `rdp-wang`: Wang et al. 2019 through dp_accounting, fixed-size replace-one,
  for comparison;
* `pld-jl`: JL clipping's mixture of PLDs (`jl_accounting.py`), the only
  accountant of a JL run.

A search asks the same question many times, so results are memoised on
(scheme, N, B, sigma, S, delta, accountant), and RDP curves of one step on
(scheme, N, B, sigma) so that questions about S cost one conversion each.
"""

import dataclasses
import functools
import math
from typing import Callable, Sequence

from scipy import optimize

from tan_tune.errors import ConfigError
from tan_tune.privacy import accountant_registry
from tan_tune.privacy import accountants
from tan_tune.privacy import limits
from tan_tune.privacy import mechanisms
from tan_tune.privacy import sampling_scheme
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.privacy.sampling_scheme import POISSON, SamplingScheme
from tan_tune.privacy.triplet import PrivacyTriplet, require_delta

# The noise multipliers calibrate_sigma searches; beyond them no useful run lies.
SIGMA_RANGE = (0.1, 1000.0)
# max_steps stops looking past this many steps.
STEPS_LIMIT = 10**9
# Relative precision of calibrate_sigma; the result is rounded up to it.
_SIGMA_RTOL = 1e-4


@dataclasses.dataclass(frozen=True)
class EpsilonReport:
  """An epsilon together with what it is an epsilon of.

  Attributes:
    epsilon: the privacy budget spent.
    delta: the delta it is paired with.
    accountant: a registered accountant's name.
    adjacency: the neighbouring relation the guarantee is for.
    sampling: how batches are drawn.
  """

  epsilon: float
  delta: float
  accountant: str
  adjacency: str = sampling_scheme.ADD_REMOVE
  sampling: str = POISSON.describe(0)

  def describe(self) -> str:
    return (
        f"eps = {self.epsilon:.3f} at delta = {self.delta:.3g}"
        f" ({self.accountant.upper()} accountant, {self.adjacency} adjacency,"
        f" {self.sampling})"
    )


def default_delta(dataset_size: int) -> float:
  """delta = 1 / N, the paper's choice (section 4.1)."""
  return 1.0 / dataset_size


def delta_or_default(delta: float | None, dataset_size: int) -> float:
  """`delta`, or 1 / N when it is unset (None): a delta of 0 is not unset,
  and `require_delta` refuses it wherever it is used."""
  return default_delta(dataset_size) if delta is None else delta


def epsilon(
    triplet: PrivacyTriplet,
    delta: float | None = None,
    accountant: str | None = None,
    scheme: SamplingScheme = POISSON,
) -> EpsilonReport:
  """The (eps, delta)-DP guarantee of DP-SGD run at `triplet`.

  Args:
    triplet: (N, B, sigma, S); q = B / N.
    delta: defaults to 1 / N.
    accountant: one of scheme.accountants; defaults to the first.
    scheme: how batches are drawn and the adjacency of the guarantee.

  Raises:
    limits.AccountantLimit: a PRV or PLD accountant would need a grid too
      large to compute (an extreme setting, far past any useful eps).
  """
  delta = delta_or_default(delta, triplet.dataset_size)
  require_delta(delta)
  accountant = accountant or scheme.default_accountant
  scheme.require_accountant(accountant)
  value = _epsilon(scheme, accountant, triplet.dataset_size,
                   triplet.batch_size, float(triplet.noise_multiplier),
                   triplet.steps, delta)
  return _report(value, delta, accountant, scheme, triplet.batch_size)


def epsilon_or_inf(
    triplet: PrivacyTriplet,
    delta: float | None = None,
    accountant: str | None = None,
    scheme: SamplingScheme = POISSON,
) -> float:
  """`epsilon`'s value, or inf where none can be computed (an accountant out
  of reach, or an overflow): for numbers that are no guarantee either way,
  such as a simulation's own eps."""
  try:
    value = epsilon(triplet, delta, accountant, scheme).epsilon
  except limits.AccountantLimit:
    return math.inf
  return value if math.isfinite(value) else math.inf


def rdp_floor(
    triplet: PrivacyTriplet, delta: float | None = None,
    scheme: SamplingScheme = SamplingScheme("fixed-with-replacement"),
) -> EpsilonReport | None:
  """The least eps any RDP accountant can give the scheme's sampler
  (add/remove), where it has a lower bound on its RDP curve (fixed-size
  batches drawn with replacement); None elsewhere.

  The conversion is monotone in the RDP curve, and the lower bound is on
  the true curve from one pair of neighbours: no valid RDP bound, converted
  the same way, gets below this.
  """
  delta = delta_or_default(delta, triplet.dataset_size)
  require_delta(delta)
  curve = scheme.sampler.rdp_lower_bound(
      triplet.dataset_size, triplet.batch_size,
      float(triplet.noise_multiplier))
  if curve is None:
    return None
  value = mechanisms.rdp_to_epsilon(curve * triplet.steps, delta)
  return _report(value, delta, "rdp (floor)", scheme, triplet.batch_size)


def composed_epsilon(
    events: Sequence[accountants.Event], delta: float
) -> EpsilonReport:
  """The guarantee of several runs (and private searches) on the same data.

  Renyi DP composes by addition at every order alpha,

      RDP_total(alpha) = sum_r S_r RDP_step(alpha; run r),

  and the total is converted to (eps, delta) once, so n runs cost far less
  than n times the eps of one. Truncated Poisson and JL clipping have no
  RDP curve: runs that are all Poisson or truncated Poisson compose as PLDs
  instead (JL's mixtures with its tail term). With one run it is `epsilon`
  with the scheme's default accountant, and a private search alone is
  priced by both selection bounds, the smaller reported
  (`accountants.tightest_selection`); `accountants.for_composition` says
  which accountant composes what.

  Raises:
    ConfigError: the runs' adjacencies differ, or truncated Poisson or JL
      clipping is mixed with fixed-size batches (no accountant composes both).
  """
  require_delta(delta)
  if not events:
    return EpsilonReport(epsilon=0.0, delta=delta, accountant="rdp")
  accountant = accountants.for_composition(events)
  if len(events) == 1 and isinstance(events[0], accountants.SearchEvent):
    value, accountant = accountants.tightest_selection(events[0], delta)
  else:
    value = accountant.epsilon(events, delta)
  runs = [e.run if isinstance(e, accountants.SearchEvent) else e
          for e in events]
  samplers = "+".join(sorted({run.scheme.sampler for run in runs}))
  if len(events) == 1 and isinstance(events[0], accountants.RunEvent):
    sampling = runs[0].scheme.describe(runs[0].triplet.batch_size)
  else:
    sampling = f"{len(events)} runs with {samplers} sampling"
  return EpsilonReport(
      epsilon=value, delta=delta, accountant=accountant.name,
      adjacency=runs[0].scheme.adjacency, sampling=sampling)


def calibrate_sigma(
    dataset_size: int,
    batch_size: int,
    steps: int,
    target_epsilon: float,
    delta: float | None = None,
    accountant: str | None = None,
    scheme: SamplingScheme = POISSON,
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
    try:
      return epsilon(PrivacyTriplet(dataset_size, batch_size, sigma, steps),
                     delta, accountant, scheme).epsilon
    except limits.AccountantLimit:
      return math.inf  # Its grid would be huge: eps is far above any target.

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
        f" B = {batch_size}, S = {steps}, delta = {delta:.3g},"
        f" {scheme.sampler} sampling and the"
        f" {accountant or scheme.default_accountant} accountant, eps ranges over [{eps_of(high):.4g},"
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
    accountant: str | None = None,
    scheme: SamplingScheme = POISSON,
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
    try:
      return epsilon(triplet, delta, accountant, scheme).epsilon <= (
          target_epsilon)
    except limits.AccountantLimit:
      return False  # Its grid would be huge: eps is far above any target.

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
    scheme: SamplingScheme, accountant: str, dataset_size: int,
    batch_size: int, sigma: float, steps: int, delta: float,
) -> float:
  run = accountants.RunEvent(
      PrivacyTriplet(dataset_size, batch_size, sigma, steps), scheme)
  return accountant_registry.named(accountant).epsilon([run], delta)


def _report(value: float, delta: float, accountant: str,
            scheme: SamplingScheme, batch_size: int) -> EpsilonReport:
  return EpsilonReport(epsilon=value, delta=delta, accountant=accountant,
                       adjacency=scheme.adjacency,
                       sampling=scheme.describe(batch_size))


def _require_positive_number(field: str, value: float) -> None:
  if not (
      isinstance(value, (int, float)) and math.isfinite(value) and value > 0
  ):
    raise ConfigError(field, value, "expected a finite number > 0")
