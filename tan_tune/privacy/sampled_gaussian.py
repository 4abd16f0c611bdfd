"""Renyi DP of the Poisson-subsampled Gaussian, exact at every order.

One DP-SGD step under Poisson sampling at rate q, add/remove-one, is the
sampled Gaussian mechanism of Mironov, Talwar and Zhang (2019). With
mu_0 = N(0, sigma^2), mu_1 = N(1, sigma^2) and mu = (1 - q) mu_0 + q mu_1,
its RDP at order alpha > 1 is log(A_alpha) / (alpha - 1), where

    A_alpha = E_{z ~ mu_0}[(mu(z) / mu_0(z))^alpha]
            = E_{z ~ mu_0}[(1 - q + q e^((2z - 1) / (2 sigma^2)))^alpha].

Integer alpha: the binomial theorem,

    A_alpha = sum_{k=0..alpha} C(alpha, k) (1 - q)^(alpha - k) q^k
              e^((k^2 - k) / (2 sigma^2)).

Fractional alpha (their section 3.3): the two summands inside the
power swap sizes at z0 = sigma^2 log(1/q - 1) + 1/2, so the power is
expanded as a binomial series in the smaller over the larger on each side,
and each Gaussian integral is an erfc:

    A_alpha = A_alpha1 + A_alpha2,
    A_alpha1 = sum_{k>=0} C(alpha, k) (1 - q)^(alpha - k) q^k
               e^((k^2 - k) / (2 sigma^2)) erfc((k - z0) / (sqrt(2) sigma)) / 2,
    A_alpha2 = sum_{k>=0} C(alpha, k) q^(alpha - k) (1 - q)^k
               e^((m^2 - m) / (2 sigma^2)) erfc((z0 - m) / (sqrt(2) sigma)) / 2,
               m = alpha - k.

C(alpha, k) changes sign at every k > alpha, so past k0 = floor(alpha) + 1
both series alternate; dp_accounting adds the terms' absolute values, an
upper bound that is loose at large q or orders near 1 (7% at q = 0.82,
sigma = 3, alpha = 1.3; 70% at q = 0.08, alpha = 1.1), and its loop gives up
(an infinite RDP) in some settings of large q. Here the terms keep their
signs. Substituting z0 gives each term of A_alpha1 as
P erfcx((k - z0) / (sqrt(2) sigma)) / 2 and of A_alpha2 as
P erfcx((z0 - m) / (sqrt(2) sigma)) / 2, with P = (1 - q)^alpha
e^(-z0^2 / (2 sigma^2)) and erfcx decreasing, so past k0 the k-th term of
the sum falls in size with |C(alpha, k)|: the series alternates with
decreasing terms, and any partial sum ending on a positive term is above
A_alpha, by less than that term. The sum stops on the first positive term
below 2^-53 of the first one: an upper bound equal to the exact value to
float64's rounding. The 1 in A_alpha is taken out before summing
(`log_moment`), so that log(A_alpha), and the RDP, keep their relative
precision at small q: about 1e-10 at q = 1e-4, 1e-7 at q = 1e-5, better
above. The slowest settings, q near 1/2 at a large sigma, take a few 1e5
terms (0.1 s).
"""

import math
from typing import Sequence

import numpy as np
from scipy import special

# The series stops on a positive term below this share of the first term
# (the sum exceeds it).
_TOLERANCE = 2.0**-53
# Terms evaluated at a time; the chunk doubles up to _MAX_TERMS in all.
_FIRST_CHUNK = 64
# Past this many terms (never in the tests' grid; q = 0.5 at sigma = 1000
# needs 600,000) the partial sum up to its last positive term is returned:
# still an upper bound, a looser one.
_MAX_TERMS = 1 << 22


def rdp(q: float, sigma: float, orders: Sequence[float]) -> np.ndarray:
  """One step's RDP at each order (> 1), add/remove-one.

  Args:
    q: the sampling rate, in [0, 1].
    sigma: the noise multiplier (noise std over the clipping norm), >= 0.
    orders: Renyi orders alpha > 1, integer or not.

  Raises:
    ValueError: q or sigma out of range, or an order <= 1.
  """
  if not 0 <= q <= 1:
    raise ValueError(f"sampling rate {q} is not in [0, 1]")
  if sigma < 0:
    raise ValueError(f"noise multiplier {sigma} is negative")
  return np.array([_rdp_at(q, sigma, float(alpha)) for alpha in orders])


def log_moment(q: float, sigma: float, alpha: float) -> float:
  """log(A_alpha) for 0 < q < 1, sigma > 0 and alpha > 1.

  Computed as log1p(A_alpha - 1), with the 1 taken out of the terms before
  summing, so that it keeps its relative precision where A_alpha is close to
  1 (a small q): at q = 1e-5 a plain log(A_alpha) keeps 4 digits.
  """
  alpha = float(alpha)
  if alpha.is_integer():
    # sum_k C(alpha, k) (1 - q)^(alpha - k) q^k = 1 takes the 1 out: the
    # terms k = 0, 1 vanish and the others are all positive.
    k = np.arange(2, int(alpha) + 1, dtype=np.float64)
    return _log1p_exp(_log_sum(
        _log_binom(alpha, k) + k * math.log(q) + (alpha - k) * math.log1p(-q)
        + _log_expm1((k * k - k) / (2 * sigma**2)), np.ones_like(k)))
  z0 = sigma**2 * math.log(1 / q - 1) + 0.5
  logs, signs = _fractional_terms(q, sigma, alpha, z0)
  # The first term of A_alpha1 is the bulk of the 1: take it out exactly.
  log_first = float(_log_gaussian_side(q, sigma, alpha, z0, np.zeros(1),
                                       below=True)[0])
  logs[0] = math.log(-math.expm1(log_first))
  signs[0] = -1.0
  rest = _log_gaussian_side(q, sigma, alpha, z0, np.full(1, alpha),
                            below=False)
  return _log1p_exp(_log_sum(np.append(logs, rest), np.append(signs, 1.0)))


def _fractional_terms(
    q: float, sigma: float, alpha: float, z0: float
) -> tuple[np.ndarray, np.ndarray]:
  """log |term| and sign of the series' terms, k = 0 .. the stopping one."""
  # Terms past k0 alternate and shrink (module docstring).
  k0 = math.floor(alpha) + 1
  logs, signs = np.empty(0), np.empty(0)
  start, size = 0, _FIRST_CHUNK
  while True:
    k = np.arange(start, start + size, dtype=np.float64)
    logs = np.append(logs, _log_binom(alpha, k) + np.logaddexp(
        _log_gaussian_side(q, sigma, alpha, z0, k, below=True),
        _log_gaussian_side(q, sigma, alpha, z0, alpha - k, below=False)))
    signs = np.append(signs, special.gammasgn(alpha - k + 1))
    stop = _stopping_index(logs, signs, k0,
                           final=start + size >= _MAX_TERMS)
    if stop is not None:
      return logs[:stop + 1], signs[:stop + 1]
    start, size = start + size, size * 2


def _rdp_at(q: float, sigma: float, alpha: float) -> float:
  if not alpha > 1:
    raise ValueError(f"Renyi order {alpha} is not > 1")
  if q == 0:
    return 0.0
  if sigma == 0 or math.isinf(alpha):
    return math.inf
  if q == 1:
    return alpha / (2 * sigma**2)  # The Gaussian mechanism itself.
  return log_moment(q, sigma, alpha) / (alpha - 1)


def _log_binom(alpha: float, k: np.ndarray) -> np.ndarray:
  """log |C(alpha, k)|; -inf where it is 0 (integer alpha, k > alpha)."""
  with np.errstate(divide="ignore"):
    return (special.gammaln(alpha + 1) - special.gammaln(k + 1)
            - special.gammaln(alpha - k + 1))


def _log_gaussian_side(q: float, sigma: float, alpha: float, z0: float,
                       m: np.ndarray, below: bool) -> np.ndarray:
  """log of q^m (1 - q)^(alpha - m) e^((m^2 - m) / (2 sigma^2)) times the
  mass of N(m, sigma^2) below z0 (or above): a term of A_alpha1 (m = k) or
  of A_alpha2 (m = alpha - k) without its binomial coefficient."""
  x = ((m - z0) if below else (z0 - m)) / (math.sqrt(2) * sigma)
  with np.errstate(over="ignore", invalid="ignore"):
    # erfc(x) / 2 for x < 0 lies in (1/2, 1]: the term as written loses
    # nothing.
    direct = (special.log_ndtr(-math.sqrt(2) * x) + m * math.log(q)
              + (alpha - m) * math.log1p(-q) + (m * m - m) / (2 * sigma**2))
    # For x >= 0 the same number is P erfcx(x) / 2, whose exponents do not
    # cancel (module docstring).
    scaled = (alpha * math.log1p(-q) - z0**2 / (2 * sigma**2)
              + np.log(special.erfcx(np.maximum(x, 0)) / 2))
  return np.where(x < 0, direct, scaled)


def _stopping_index(logs: np.ndarray, signs: np.ndarray, k0: int,
                    final: bool) -> int | None:
  """The first k >= k0 whose term is positive and below _TOLERANCE of the
  first term; with `final`, the last positive one at least."""
  positive = np.flatnonzero((signs > 0) & (np.arange(len(logs)) >= k0))
  if not len(positive):
    return None
  # Terms up to k0 are positive and the rest alternate and shrink: the sum
  # exceeds its first term.
  small = positive[logs[positive] <= logs[0] + math.log(_TOLERANCE)]
  if len(small):
    return int(small[0])
  return int(positive[-1]) if final else None


def _log_sum(logs: np.ndarray, signs: np.ndarray) -> float:
  """log(sum signs e^logs) for a sum known to be >= 0, summed exactly (fsum)
  after scaling. Where rounding leaves nothing, float64's resolution bounds
  the sum instead, so that the result stays an upper bound."""
  top = float(np.max(logs))
  scaled = np.exp(logs - top)
  total = math.fsum(signs * scaled)
  floor = math.fsum(scaled) * 2.0**-52
  return top + math.log(max(total, floor))


def _log_expm1(x: np.ndarray) -> np.ndarray:
  """log(e^x - 1) for x > 0, without overflow."""
  return x + np.log(-np.expm1(-x))


def _log1p_exp(y: float) -> float:
  """log(1 + e^y), precise for y far below 0."""
  return float(np.logaddexp(0.0, y))
