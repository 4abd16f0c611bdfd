"""Epsilon of DP-SGD with JL-projection clipping (DP-SGD-JL), by PLD.

JL clipping estimates each |g_i| from r random projections shared by the
batch, M_i^2 = (1/r) sum_j <g_i, v_j>^2 with v_j ~ N(0, I), and clips with
min(1, C / M_i). Given the probes, an example's clipped contribution has
norm min(|g|, C |g| / M) <= C Z_r, where

    Z_r = |g| / M = sqrt(r / chi2_r),      P(Z_r <= z) = P(chi2_r >= r / z^2),

so each step is a mixture over Z_r of Poisson-subsampled Gaussian mechanisms
with sensitivity C Z_r. Z_r has a polynomial tail (P(Z_r > s) ~ s^-r), so
Renyi DP is infinite at every order: RDP must never account a JL run. Here:

* the mixture's privacy loss distribution: Z_r on a geometric grid (ratio
  GRID_RATIO), each interval's mass at its upper end (pessimistic), each a
  dp_accounting PLD of the subsampled Gaussian (pessimistic bins), folded
  with `compute_mixture` (the mixture that also reveals Z: an upper bound),
  then composed over S steps;
* the tail: Z_r is replaced by min(Z_r, cap). The two mechanisms differ only
  when the differing example is sampled and Z_r > cap, probability at most
  q p per step, p = P(Z_r > cap); coupling gives
      delta(eps) <= delta_capped(eps) + e^eps S q p,
  and the cap is chosen so that e^eps S q p <= TAIL_SHARE delta;
* when that cap exceeds MAX_CAP (small r: r = 4 needs Z up to hundreds) no
  finite eps is given: the answer is inf, never a number;
* a floor that holds for any S, from one step and one sampled example:
      delta(eps) >= q E_Z[delta_Gauss(mu = Z_r / sigma; eps')],
      eps' = log(1 + (e^eps - 1) / q).
"""

import functools
import math

from dp_accounting.pld import privacy_loss_distribution
from scipy import integrate
from scipy import optimize
from scipy import stats

from tan_tune.privacy import limits

# Geometric grid of Z_r: the reference values of our notes use 1.04.
GRID_RATIO = 1.04
DISCRETISATION = 5e-3
# e^eps S q P(Z_r > cap) may use this share of delta.
TAIL_SHARE = 1e-3
# Sensitivities beyond this many C make the PLD's support unmanageable.
MAX_CAP = 100.0
# The grid starts where P(Z_r < z) is negligible.
_LOW_MASS = 1e-12
# (q, sigma, S, r): one run; r is None for exact clipping.
Run = tuple[float, float, int, int | None]


def z_cdf(z: float, projections: int) -> float:
  """P(Z_r <= z) for Z_r = sqrt(r / chi2_r)."""
  return float(stats.chi2.sf(projections / z**2, projections))


def jl_epsilon(q: float, sigma: float, steps: int, delta: float,
               projections: int, grid_ratio: float = GRID_RATIO) -> float:
  """eps after S steps of JL clipping with r projections; inf if none.

  As r grows Z_r -> 1 and eps falls to exact clipping's at sensitivity up
  to `grid_ratio`.
  """
  return composed_epsilon(((q, sigma, steps, projections),), delta, grid_ratio)


@functools.lru_cache(maxsize=1024)
def composed_epsilon(runs: tuple[Run, ...], delta: float,
                     grid_ratio: float = GRID_RATIO) -> float:
  """eps of Poisson-sampled runs on one dataset (add/remove-one), composed
  as PLDs; each run is (q, sigma, S, r), r None for exact clipping.

  The caps depend on eps through e^eps: start from the eps of exact clipping
  and raise the guess until the tails, whose shares of TAIL_SHARE delta are
  split evenly between the JL runs, fit.
  """
  jl_runs = sum(r is not None for *_, r in runs)
  guess = _plain_epsilon(runs, delta)
  for _ in range(8):
    total = None
    for q, sigma, steps, projections in runs:
      if projections is None:
        step = _gaussian(q, sigma, 1.0)
      else:
        tail = TAIL_SHARE * delta / (jl_runs * steps * q) * math.exp(-guess)
        if tail <= 0:  # e^-eps underflowed: the cap is astronomical.
          return math.inf
        cap = math.sqrt(projections / stats.chi2.ppf(tail, projections))
        if cap > MAX_CAP:
          return math.inf
        grid = _grid(projections, cap, grid_ratio)
        # Each component's PLD spans about (z / sigma)(z / sigma + 10).
        points = sum((z / sigma) * (z / sigma + 10) for z in grid)
        limits.require_grid(
            "pld-jl", points / DISCRETISATION, DISCRETISATION,
            f"{len(grid)} Gaussian components up to sensitivity {cap:.3g} C"
            f" at sigma = {sigma:g}: too wide to mix")
        step = _mixture(q, sigma, projections, grid)
      composed = step.self_compose(steps)
      total = composed if total is None else total.compose(composed)
    eps = total.get_epsilon_for_delta(
        delta * (1 - TAIL_SHARE) if jl_runs else delta)
    if eps <= guess:
      return float(eps)
    guess = eps + 1.0
  return math.inf


def jl_floor(q: float, sigma: float, delta: float, projections: int) -> float:
  """The least eps any accountant can give JL clipping, at any S >= 1."""
  top = stats.chi2.isf(1e-16, projections)

  def floor_delta(eps: float) -> float:
    # log(1 + (e^eps - 1) / q), safe for large eps.
    shifted = eps - math.log(q) + math.log1p(-math.exp(-eps) * (1 - q))

    def integrand(x: float) -> float:
      if x <= 0:
        return 0.0
      mu = math.sqrt(projections / x) / sigma
      gauss = (stats.norm.cdf(-shifted / mu + mu / 2)
               - math.exp(shifted + stats.norm.logcdf(-shifted / mu - mu / 2)))
      return max(gauss, 0.0) * stats.chi2.pdf(x, projections)

    value, _ = integrate.quad(
        integrand, 0, top, limit=500,
        points=[projections * f for f in (1e-4, 1e-3, 1e-2, 1e-1, 1)])
    return q * value

  if floor_delta(1e-3) <= delta:
    return 0.0
  # r = 1 and 2 have floors in the millions: search log(eps).
  gap = lambda log_eps: math.log(
      max(floor_delta(math.exp(log_eps)), 1e-300) / delta)
  if gap(math.log(1e9)) > 0:
    return math.inf
  return float(math.exp(optimize.brentq(gap, math.log(1e-3), math.log(1e9),
                                        xtol=1e-7)))


def tail_mass(projections: int, cap: float) -> float:
  """P(Z_r > cap)."""
  return 1.0 - z_cdf(cap, projections)


def _grid(projections: int, cap: float, grid_ratio: float) -> list[float]:
  """Z_r's values, geometric from where its mass starts up to the cap."""
  grid = [math.sqrt(projections / stats.chi2.isf(_LOW_MASS, projections))]
  while grid[-1] < cap:
    grid.append(min(grid[-1] * grid_ratio, cap))
  return grid


def _mixture(q: float, sigma: float, projections: int, grid: list[float]):
  """One step's PLD: Z_r on the grid, each interval's mass at its top."""
  cap = grid[-1]
  masses = [z_cdf(grid[0], projections)] + [
      z_cdf(b, projections) - z_cdf(a, projections)
      for a, b in zip(grid, grid[1:])]
  masses[-1] += tail_mass(projections, cap)  # min(Z_r, cap) sits at the cap.
  pld, total = None, 0.0
  for z, mass in zip(grid, masses):
    if mass <= 0:
      continue
    step = _gaussian(q, sigma, z)
    total += mass
    pld = step if pld is None else step.compute_mixture(pld, mass / total)
  return pld


def _gaussian(q: float, sigma: float, sensitivity: float):
  """One Poisson-subsampled Gaussian step's PLD, in units of C."""
  return privacy_loss_distribution.from_gaussian_mechanism(
      sigma, sensitivity=sensitivity, sampling_prob=q,
      pessimistic_estimate=True,
      value_discretization_interval=DISCRETISATION)


def _plain_epsilon(runs: tuple[Run, ...], delta: float) -> float:
  """The runs with exact clipping (sensitivity C), on the same grid."""
  total = None
  for q, sigma, steps, _ in runs:
    composed = _gaussian(q, sigma, 1.0).self_compose(steps)
    total = composed if total is None else total.compose(composed)
  return float(total.get_epsilon_for_delta(delta))
