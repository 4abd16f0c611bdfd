"""Renyi DP of DP-SGD with fixed-size batches (Birrell et al., NeurIPS 2024).

Each step draws exactly B of the N examples, without replacement (FSwoR) or
with replacement (FSwR), clips each gradient to norm C and adds N(0, sigma^2
C^2 I). Under add/remove adjacency the differing example can displace one
other, so the sum moves by up to 2C: the bounds below are written with the
moments of the Gaussian likelihood ratio L for a mean shift of 2C,

    E[L^l] = e^(2 l (l - 1) / sigma^2),
    M_k = E[(L - 1)^k]
        = sum_{l=2..k} (-1)^(k-l) C(k, l) e^(2 l (l-1) / sigma^2) + (-1)^(k-1) (k-1),
    B_k = M_k (k even),  sqrt(M_{k-1} M_{k+1}) (k odd),

with q = B / N and the falling factorial alpha^(k) = alpha (alpha-1) ...
(alpha-k+1). Per-step RDP is returned at each order alpha; steps compose by
addition (`accounting.py` converts to (eps, delta)).

* FSwoR add/remove, integer alpha (theorem 3.1):
      eps(alpha) <= log sum_{k=0..alpha} C(alpha, k) (1-q)^(alpha-k) q^k
                        e^(2 k (k-1) / sigma^2) / (alpha - 1),
  the Poisson add/remove RDP at noise sigma / 2.
* FSwoR add/remove, any alpha > 1 (theorem 3.3, Taylor order m >= 3):
      eps(alpha) <= log H / (alpha - 1),
      H = 1 + sum_{k=2..m-1} q^k alpha^(k) M_k / k! + R_m,
  with the remainder R_m of `_taylor_remainder`. RDP grows with alpha, so at
  a fractional order the integer formula at ceil(alpha) also bounds it; the
  smaller of the two is used.
* FSwoR replace-one (theorem 3.4): see `_replace_one`. Its remainder E_m is
  not in our notes; it was reconstructed to reproduce the authors' reference
  values (all seven to 4e-7) and re-derived (docs/privacy.md, "Samplers").
  With the moments of a C shift it bounds Poisson replace-one as well.
* FSwR add/remove (theorem 3.6): with a_n = C(B, n) N^-n (1 - 1/N)^(B-n) the
  chance that the differing example is drawn n times, any cut K,
  q~ = 1 / (1 + (1 - 1/N)^B / sum_{n<=K} a_n) and a~_n = a_n / q~,
      eps(alpha) <= log[1 + sum_{n<=K} a~_n min(H(alpha, sigma/n, q~) - 1,
                                                  e^(2 alpha (alpha-1) n^2 / sigma^2) - 1)
                          + sum_{n>K} a_n (e^(2 alpha (alpha-1) n^2 / sigma^2) - 1)]
                   / (alpha - 1);
  the smallest over K = 1 .. `_FSWR_MAX_CUT` is used. A lower bound comes
  from one pair of neighbours (`fswr_add_remove_rdp_lower`).
"""

import functools
import math

import mpmath
import numpy as np
from scipy import special

# The paper's Taylor order for theorem 3.3; its tables use m = 4.
TAYLOR_ORDER = 4
# FSwR: the cut K is chosen among 1 .. this many repetitions.
_FSWR_MAX_CUT = 8
# FSwR lower bound: repetitions up to this many are integrated numerically.
_FSWR_LOWER_CUT = 16
# Decimal digits for M_k beyond those its cancellation eats.
_DIGITS = 30


def fswor_add_remove_rdp(
    q: float, sigma: float, orders: tuple[float, ...]
) -> np.ndarray:
  """Per-step RDP of FSwoR under add/remove at each order (theorems 3.1, 3.3)."""
  return np.array([_fswor_add_remove(q, sigma, a) for a in orders])


def fswor_integer_rdp(q: float, sigma: float, alpha: int) -> float:
  """Theorem 3.1: the exact binomial sum at an integer order alpha >= 2."""
  k = np.arange(alpha + 1)
  log_terms = (
      special.gammaln(alpha + 1)
      - special.gammaln(k + 1)
      - special.gammaln(alpha - k + 1)
      + (alpha - k) * math.log1p(-q)
      + k * math.log(q)
      + 2.0 * k * (k - 1) / sigma**2
  )
  return float(special.logsumexp(log_terms)) / (alpha - 1)


def fswor_taylor_rdp(
    q: float, sigma: float, alpha: float, m: int = TAYLOR_ORDER
) -> float:
  """Theorem 3.3: log H / (alpha - 1) at any order alpha > 1."""
  return _log_h(q, sigma, alpha, m) / (alpha - 1)


def taylor_terms(
    q: float, sigma: float, alpha: float, m: int = TAYLOR_ORDER
) -> tuple[float, float]:
  """(H - 1 - R_m, R_m) of theorem 3.3: the Taylor sum and its remainder."""
  return (_taylor_series(q, sigma, alpha, m),
          math.exp(_log_taylor_remainder(q, sigma, alpha, m)))


def fswor_replace_one_rdp(
    q: float, sigma: float, orders: tuple[float, ...]
) -> np.ndarray:
  """Per-step RDP of FSwoR under replace-one at each order (theorem 3.4).

  eps(alpha) <= log[1 + q^2 alpha (alpha-1) (e^(4/sigma^2) - e^(2/sigma^2))
                    + sum_{k=3..m-1} q^k F_k / k! + E_m] / (alpha - 1),
  F_k and E_m as in `_log_replace_one_terms`, moments for a 2C shift.
  """
  if q >= 1:  # B = N: no subsampling, a Gaussian of sensitivity 2C.
    return 2 * np.asarray(orders) / sigma**2
  lead = math.exp(4 / sigma**2) - math.exp(2 / sigma**2)
  return np.array(
      [_replace_one(q, sigma / 2, lead, a, TAYLOR_ORDER) for a in orders]
  )


def poisson_replace_one_rdp(
    q: float, sigma: float, orders: tuple[float, ...]
) -> np.ndarray:
  """The same Taylor bound for Poisson sampling under replace-one.

  The replaced example is in the batch with probability q and moves the sum
  by up to 2C, each version at most C from the batch without it: the
  leading term is q^2 alpha (alpha-1) (e^(1/sigma^2) - e^(-1/sigma^2)) and
  the moments are those of a C shift. For comparison with FSwoR (same
  leading order in q).
  """
  lead = math.exp(1 / sigma**2) - math.exp(-1 / sigma**2)
  return np.array(
      [_replace_one(q, sigma, lead, a, TAYLOR_ORDER) for a in orders]
  )


def fswr_add_remove_rdp(
    dataset_size: int, batch_size: int, sigma: float, orders: tuple[float, ...]
) -> np.ndarray:
  """Per-step RDP of FSwR under add/remove at each order (theorem 3.6)."""
  return np.array(
      [_fswr_upper(dataset_size, batch_size, sigma, a) for a in orders]
  )


def fswr_add_remove_rdp_lower(
    dataset_size: int, batch_size: int, sigma: float, orders: tuple[float, ...]
) -> np.ndarray:
  """A lower bound on the per-step RDP of FSwR under add/remove.

  One pair of neighbours: every other example has gradient -C, the added one
  +C, so with the added example drawn n times the noisy sum sits 2 n C
  further along. Its outputs are P = sum_n a_n N(2n, sigma^2) against
  Q = N(0, sigma^2) (C = 1), and the mechanism's RDP is at least this pair's
  D_alpha(P || Q). With P_K the first K + 1 components and, as
  (x + y)^alpha >= x^alpha + y^alpha,

      E_Q[(P/Q)^alpha] >= E_Q[(P_K/Q)^alpha]
                          + sum_{n>K} a_n^alpha e^(2 alpha (alpha-1) n^2 / sigma^2),

  the first term by quadrature on a grid fine beside sigma (trapezoid rule,
  whose error on these Gaussian integrands is far below the double's).
  """
  log_a = _log_draw_counts(dataset_size, batch_size)
  cut = min(_FSWR_LOWER_CUT, batch_size)
  n = np.arange(len(log_a))
  result = []
  for alpha in orders:
    # (P_K / Q)^alpha Q has its mass up to about 2 K alpha.
    x = np.arange(-12 * sigma, 2 * cut * alpha + 12 * sigma, sigma / 40)
    log_ratio = special.logsumexp(
        log_a[: cut + 1, None]
        + (4 * n[: cut + 1, None] * x - 4 * n[: cut + 1, None] ** 2)
        / (2 * sigma**2),
        axis=0,
    )  # log(P_K / Q)(x)
    log_q = -(x**2) / (2 * sigma**2) - math.log(sigma * math.sqrt(2 * math.pi))
    head = special.logsumexp(alpha * log_ratio + log_q) + math.log(sigma / 40)
    tail = alpha * log_a[cut + 1 :] + 2 * alpha * (alpha - 1) * n[cut + 1 :] ** 2 / sigma**2
    value = special.logsumexp(np.concatenate([[head], tail])) / (alpha - 1)
    result.append(max(0.0, float(value)))
  return np.array(result)


@functools.lru_cache(maxsize=65536)
def _fswor_add_remove(q: float, sigma: float, alpha: float) -> float:
  if q >= 1:  # B = N: no subsampling, a Gaussian of sensitivity 2C.
    return 2 * alpha / sigma**2
  upper = fswor_integer_rdp(q, sigma, math.ceil(alpha))
  if float(alpha).is_integer():
    return upper
  return min(upper, fswor_taylor_rdp(q, sigma, alpha))


def _log_h(q: float, sigma: float, alpha: float, m: int) -> float:
  """log H of theorem 3.3, from log(H - 1) so that tiny q keeps its digits."""
  return float(np.logaddexp(0.0, _log_h_minus_1(q, sigma, alpha, m)))


def _log_h_minus_1(q: float, sigma: float, alpha: float, m: int) -> float:
  """log(H - 1) = log(Taylor sum + R_m); logs, as R_m overflows at large alpha."""
  series = _taylor_series(q, sigma, alpha, m)
  log_remainder = _log_taylor_remainder(q, sigma, alpha, m)
  if log_remainder > 700:  # the series is negligible beside it
    return log_remainder
  return math.log(series + math.exp(log_remainder))


def _taylor_series(q: float, sigma: float, alpha: float, m: int) -> float:
  """sum_{k=2..m-1} q^k alpha^(k) M_k / k!."""
  return sum(
      q**k * _falling(alpha, k) * _moment(sigma, k) / math.factorial(k)
      for k in range(2, m)
  )


def _log_taylor_remainder(q: float, sigma: float, alpha: float, m: int) -> float:
  """log R_m of theorem 3.3 (every term of R_m is >= 0).

  alpha <= m:  (q^m / m!) |alpha^(m)| (1 - q)^(alpha - m) B_m;
  alpha > m:   q^m |alpha^(m)| sum_{l=0..ceil(alpha)-m} q^l (ceil(alpha)-m)^(l)
                   B_{m+l} / (m+l)!  +  (q^m / m!) |alpha^(m)| B_m.
  """
  falling = abs(_falling(alpha, m))
  if falling == 0.0:  # an integer order below m: the expansion is exact
    return -math.inf
  lead = m * math.log(q) + math.log(falling)
  if alpha <= m:
    return (lead - math.lgamma(m + 1) + (alpha - m) * math.log1p(-q)
            + _log_b(sigma / 2, m))
  top = math.ceil(alpha) - m
  l = np.arange(top + 1)
  log_tail = (
      l * math.log(q)
      + special.gammaln(top + 1) - special.gammaln(top - l + 1)
      + np.array([_log_b(sigma / 2, m + i) for i in l])
      - special.gammaln(m + l + 1)
  )
  return lead + float(np.logaddexp(
      special.logsumexp(log_tail), _log_b(sigma / 2, m) - math.lgamma(m + 1)))


@functools.lru_cache(maxsize=65536)
def _replace_one(
    q: float, scale: float, lead: float, alpha: float, m: int
) -> float:
  """log H / (alpha - 1) of theorem 3.4, moments at noise std `scale`.

  H - 1 = q^2 alpha (alpha-1) lead + sum_{k=3..m-1} q^k F_k / k! + E_m, with

    F_k = (alpha-1) alpha^(k-1) B_k [c_k + sum_{j=0..k} C(k,j) |alpha/(alpha-1)
          prod_{l=1..j-1} (1 - l/alpha) prod_{l=0..k-j-1} (1 + (l-1)/alpha) - 1|],
          c_k = 4 for even k, 3 for odd k (alpha^(k-1) a power here);
    E_m = (q^m / m!) sum_{j=0..m} C(m,j) |alpha^(j) (1-alpha)^(m-j)|
          (1-q)^(1-alpha-m+j) G_j,
    G_j = B_m (1-q)^(alpha-j)                                 if alpha <= j,
          B_m + sum_{l=0..n} q^l n^(l) B_{m+l} m! / (m+l)!    otherwise,
          n = ceil(alpha - j).

  Every term is >= 0 and is summed in logs.
  """
  log_terms = [2 * math.log(q) + math.log(alpha * (alpha - 1) * lead)]
  for k in range(3, m):
    inner = sum(
        math.comb(k, j) * abs(
            alpha / (alpha - 1)
            * math.prod(1 - l / alpha for l in range(1, j))
            * math.prod(1 + (l - 1) / alpha for l in range(k - j)) - 1)
        for j in range(k + 1)
    )
    c_k = 4 if k % 2 == 0 else 3
    log_terms.append(
        k * math.log(q) - math.lgamma(k + 1) + math.log(alpha - 1)
        + (k - 1) * math.log(alpha) + _log_b(scale, k) + math.log(c_k + inner))
  log_terms.append(_log_replace_one_remainder(q, scale, alpha, m))
  return float(np.logaddexp(0.0, special.logsumexp(log_terms))) / (alpha - 1)


def _log_replace_one_remainder(
    q: float, scale: float, alpha: float, m: int
) -> float:
  """log E_m of theorem 3.4 (see `_replace_one`)."""
  log_b_m = _log_b(scale, m)
  terms = []
  for j in range(m + 1):
    weight = abs(_falling(alpha, j) * _falling(1 - alpha, m - j))
    if weight == 0.0:
      continue
    if alpha <= j:
      log_g = log_b_m + (alpha - j) * math.log1p(-q)
    else:
      n = math.ceil(alpha - j)
      l = np.arange(n + 1)
      log_g = float(np.logaddexp(log_b_m, special.logsumexp(
          l * math.log(q)
          + special.gammaln(n + 1) - special.gammaln(n - l + 1)
          + np.array([_log_b(scale, m + i) for i in l])
          + math.lgamma(m + 1) - special.gammaln(m + l + 1))))
    terms.append(math.log(math.comb(m, j)) + math.log(weight)
                 + (1 - alpha - m + j) * math.log1p(-q) + log_g)
  return m * math.log(q) - math.lgamma(m + 1) + float(special.logsumexp(terms))


@functools.lru_cache(maxsize=4096)
def _moment(sigma: float, k: int) -> float:
  """M_k, the k-th central moment of the likelihood ratio for a 2C shift."""
  return float(_exact_moment(sigma / 2, k))


def _exact_moment(scale: float, k: int):
  """M_k for a unit shift against noise std `scale` (sigma / shift).

  E[L^l] = e^(l (l-1) / (2 scale^2)). The terms nearly cancel when scale is
  large: M_k is about scale^-k while they reach 2^k, so they are summed
  with that many more digits.
  """
  with mpmath.workdps(_digits(scale, k)):
    half_precision = 1 / (2 * mpmath.mpf(scale) ** 2)
    total = sum(
        (-1) ** (k - l) * mpmath.binomial(k, l)
        * mpmath.exp(half_precision * l * (l - 1))
        for l in range(2, k + 1)
    )
    return total + (-1) ** (k - 1) * (k - 1)


@functools.lru_cache(maxsize=8192)
def _log_b(scale: float, k: int) -> float:
  """log B_k: B_k = M_k for even k, sqrt(M_{k-1} M_{k+1}) for odd k.

  `scale` is sigma / shift: sigma / 2 for fixed-size batches, sigma for
  Poisson replace-one.
  """
  with mpmath.workdps(_digits(scale, k)):
    if k % 2 == 0:
      return float(mpmath.log(_exact_moment(scale, k)))
    return float(mpmath.log(_exact_moment(scale, k - 1))
                 + mpmath.log(_exact_moment(scale, k + 1))) / 2


def _digits(scale: float, k: int) -> int:
  return _DIGITS + int((k + 1) * max(1.0, math.log10(scale) + 1))


def _falling(x: float, k: int) -> float:
  """x^(k) = x (x - 1) ... (x - k + 1)."""
  return math.prod(x - i for i in range(k))


@functools.lru_cache(maxsize=256)
def _log_draw_counts(dataset_size: int, batch_size: int) -> np.ndarray:
  """log a_n, n = 0..B: the differing example drawn n times in B draws."""
  n = np.arange(batch_size + 1)
  p = 1.0 / dataset_size
  return (
      special.gammaln(batch_size + 1)
      - special.gammaln(n + 1)
      - special.gammaln(batch_size - n + 1)
      + n * math.log(p)
      + (batch_size - n) * math.log1p(-p)
  )


@functools.lru_cache(maxsize=65536)
def _fswr_upper(
    dataset_size: int, batch_size: int, sigma: float, alpha: float
) -> float:
  log_a = _log_draw_counts(dataset_size, batch_size)
  n = np.arange(len(log_a))
  log_gauss = 2 * alpha * (alpha - 1) * n**2 / sigma**2  # log e^(...) per n
  best = math.inf
  for cut in range(1, min(_FSWR_MAX_CUT, batch_size) + 1):
    head = np.exp(log_a[1 : cut + 1])
    q_cut = 1.0 / (1.0 + math.exp(log_a[0] - math.log(head.sum())))
    # log of a~_n min(H(alpha, sigma/n, q~) - 1, e^(...) - 1), n = 1..K.
    log_head = [
        math.log(weight) + min(
            _log_h_minus_1(q_cut, sigma / count, alpha, TAYLOR_ORDER),
            log_gauss[count] + math.log(-math.expm1(-log_gauss[count])))
        for count, weight in enumerate(head / q_cut, start=1)
    ]
    # sum_{n>K} a_n (e^g_n - 1), in logs: its terms overflow for large n.
    rest = log_a[cut + 1 :] + np.log(-np.expm1(-log_gauss[cut + 1 :]))
    log_rest = rest + log_gauss[cut + 1 :]
    # Arrays, not lists: B + 1 terms, a million at B = 10^6.
    log_total = special.logsumexp(np.concatenate([[0.0], log_head, log_rest]))
    best = min(best, float(log_total) / (alpha - 1))
  return best
