"""tan_tune.privacy.sampled_gaussian: the Poisson-subsampled Gaussian's RDP,
against dp_accounting (integer orders), Opacus (fractional orders) and the
defining integral."""

import itertools
import math

from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant
import mpmath
import numpy as np
from opacus.accountants.analysis import rdp as opacus_rdp
import pytest

from tan_tune.privacy import sampled_gaussian

EPS = 2.0**-52
RATES = (0.01, 0.05, 0.2, 0.36, 0.6, 0.8192, 0.9)
SIGMAS = (0.5, 0.8, 1.0, 1.5, 2.5, 3.0, 5.0)
FRACTIONAL = (1.1, 1.3, 1.5, 2.5, 3.7, 5.5, 9.9)
INTEGER = (2, 3, 5, 10, 32, 256, 1024)


def _dp_accounting(q, sigma, orders):
  accountant = rdp_privacy_accountant.RdpAccountant(list(orders))
  accountant.compose(dp_event.PoissonSampledDpEvent(
      q, dp_event.GaussianDpEvent(sigma)))
  return accountant.rdp


@pytest.mark.parametrize("q, sigma", itertools.product(RATES, SIGMAS))
def test_integer_orders_are_dp_accountings(q, sigma):
  ours = sampled_gaussian.rdp(q, sigma, INTEGER)
  theirs = _dp_accounting(q, sigma, INTEGER)
  for alpha, mine, their in zip(INTEGER, ours, theirs):
    # Both sum positive terms in log space: log(A) carries a few units of
    # float64's rounding, relative, and absolute near A = 1 (log A = 0).
    assert mine == pytest.approx(their, rel=1e-12, abs=16 * EPS / (alpha - 1))


@pytest.mark.parametrize("q, sigma", itertools.product(RATES, SIGMAS))
def test_fractional_orders_are_opacus_series(q, sigma):
  ours = sampled_gaussian.rdp(q, sigma, FRACTIONAL)
  for alpha, mine in zip(FRACTIONAL, ours):
    theirs = opacus_rdp.compute_rdp(q=q, noise_multiplier=sigma, steps=1,
                                    orders=[alpha])[0]
    # Opacus stops each of its two series at its first term below e^-30;
    # the series alternate with shrinking terms by then, so each tail is
    # below e^-30, an absolute error in log(A) (A >= 1).
    assert mine == pytest.approx(theirs, rel=1e-9,
                                 abs=2 * math.exp(-30) / (alpha - 1))


def _integral_log_moment(q, sigma, alpha):
  """log A_alpha by quadrature of its definition, at 40 digits."""
  with mpmath.workdps(40):
    q, sigma, alpha = mpmath.mpf(q), mpmath.mpf(sigma), mpmath.mpf(alpha)

    def integrand(z):
      ratio = mpmath.exp((2 * z - 1) / (2 * sigma**2))
      return mpmath.npdf(z, 0, sigma) * (1 - q + q * ratio)**alpha

    z0 = sigma**2 * mpmath.log(1 / q - 1) + mpmath.mpf(1) / 2
    cuts = sorted({-20 * sigma, z0, alpha, alpha + 20 * sigma})
    return mpmath.log(mpmath.quad(integrand, [-mpmath.inf, *cuts,
                                              mpmath.inf]))


@pytest.mark.parametrize("q, sigma, alpha", [
    (0.8192, 3.0, 1.3), (512 / 1437, 3.918, 1.5), (0.04, 1.5, 2.5),
    (0.01, 5.0, 1.1), (0.9, 0.5, 1.1), (0.9, 0.5, 9.9), (0.3, 2.0, 7.0),
    (4096 / 50_000, 3.0, 1.1), (1e-4, 1.0, 1.1), (1e-5, 10.0, 1.5),
    (1e-5, 10.0, 2.0), (0.999, 0.3, 1.1),
])
def test_log_moment_is_the_defining_integral(q, sigma, alpha):
  exact = float(_integral_log_moment(q, sigma, alpha))
  ours = sampled_gaussian.log_moment(q, sigma, alpha)
  # With the 1 taken out, the terms summed are at most about s = min(1,
  # alpha q), each held as its logarithm: off by a few units of float64's
  # precision times (1 + |log s|), relative.
  size = min(1, alpha * q)
  assert abs(ours - exact) <= 8 * EPS * (size * (1 + abs(math.log(size)))
                                         + abs(exact))


def test_a_large_rate_at_fractional_and_integer_orders():
  # TAN's N = 5,000 run: q = 0.8192, sigma = 3. dp_accounting's absolute
  # values overstate alpha = 1.3 by 7%; integer orders are exact in both.
  ours = sampled_gaussian.rdp(0.8192, 3.0, [1.3, 2, 3])
  assert ours == pytest.approx([0.04879219, 0.07591, 0.11566], rel=1e-4)
  assert _dp_accounting(0.8192, 3.0, [1.3])[0] == pytest.approx(0.05207,
                                                                 rel=1e-3)


@pytest.mark.parametrize("q, sigma", itertools.product(RATES, SIGMAS))
def test_never_above_dp_accountings_bound(q, sigma):
  ours = sampled_gaussian.rdp(q, sigma, FRACTIONAL)
  bound = _dp_accounting(q, sigma, FRACTIONAL)
  # Where the negative terms are negligible the two are equal but for
  # rounding, dp_accounting's as in test_integer_orders_are_dp_accountings.
  slack = 1e-12 * bound + 16 * EPS / (np.array(FRACTIONAL) - 1)
  assert np.all(ours <= bound + slack)


def test_a_series_cut_short_stays_above_its_limit(monkeypatch):
  # q = 0.9 at sigma = 0.5 and alpha = 1.1 needs thousands of terms; cut at
  # 64, the sum ends on a positive term and is above the exact value.
  exact = sampled_gaussian.log_moment(0.9, 0.5, 1.1)
  monkeypatch.setattr(sampled_gaussian, "_MAX_TERMS", 64)
  cut = sampled_gaussian.log_moment(0.9, 0.5, 1.1)
  assert exact < cut < exact * (1 + 1e-4)


def test_edges():
  assert list(sampled_gaussian.rdp(0.0, 1.0, [1.5, 2])) == [0, 0]
  assert list(sampled_gaussian.rdp(1.0, 2.0, [1.5, 4])) == [1.5 / 8, 4 / 8]
  assert list(sampled_gaussian.rdp(0.5, 0.0, [1.5])) == [math.inf]
  for q, sigma, orders in [(1.5, 1, [2]), (0.5, -1, [2]), (0.5, 1, [1.0])]:
    with pytest.raises(ValueError):
      sampled_gaussian.rdp(q, sigma, orders)
