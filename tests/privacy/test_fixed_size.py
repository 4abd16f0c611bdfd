"""Tests of the fixed-size RDP bounds against the paper's reference values.

Per-step values (m = 4) computed with the paper's formulas by its authors;
ours must agree to relative 1e-6.
"""

import math

from opacus.accountants.analysis import rdp
import pytest

from tan_tune.privacy import fixed_size

# q, sigma, alpha: FSwoR replace-one (thm 3.4), FSwoR add/remove (thm 3.3),
# add/remove integer (thm 3.1), Poisson replace-one (Taylor bound).
TABLE = [
    (0.0024, 6, 2, 7.007539e-07, 6.769096e-07, 6.769096e-07, 6.405692e-07),
    (0.0024, 6, 8, 2.834555e-06, 2.712422e-06, 2.712399e-06, 2.565227e-06),
    (0.0024, 6, 16, 5.759052e-06, 5.437847e-06, 5.437563e-06, 5.138461e-06),
    (0.0256, 2.5, 2, 1.112398e-03, 5.873452e-04, 5.873452e-04, 4.338983e-04),
    (0.0256, 2.5, 8, 4.605599e-02, 3.046333e-03, 2.915783e-03, 1.858821e-03),
    (0.08192, 3, 2, 1.073221e-02, 3.748535e-03, 3.748535e-03, 3.215695e-03),
    (0.08192, 3, 8, 3.284936e-01, 2.491905e-02, 2.251208e-02, 1.745604e-02),
]


@pytest.mark.parametrize("q, sigma, alpha, replace_one, taylor, integer,"
                         " poisson_replace_one", TABLE)
def test_per_step_values_reproduce_the_note(
    q, sigma, alpha, replace_one, taylor, integer, poisson_replace_one):
  assert fixed_size.fswor_replace_one_rdp(q, sigma, (alpha,))[0] == (
      pytest.approx(replace_one, rel=1e-6))
  assert fixed_size.fswor_taylor_rdp(q, sigma, alpha) == (
      pytest.approx(taylor, rel=1e-6))
  assert fixed_size.fswor_integer_rdp(q, sigma, alpha) == (
      pytest.approx(integer, rel=1e-6))
  assert fixed_size.poisson_replace_one_rdp(q, sigma, (alpha,))[0] == (
      pytest.approx(poisson_replace_one, rel=1e-6))


@pytest.mark.parametrize("q, sigma", [(0.0024, 6), (0.0256, 2.5), (0.3, 1.0)])
@pytest.mark.parametrize("alpha", [2, 3, 7, 20, 63])
def test_integer_add_remove_is_poisson_rdp_at_half_sigma(q, sigma, alpha):
  poisson = rdp.compute_rdp(q=q, noise_multiplier=sigma / 2, steps=1,
                            orders=[alpha])[0]
  assert fixed_size.fswor_integer_rdp(q, sigma, alpha) == (
      pytest.approx(poisson, rel=1e-9))


@pytest.mark.parametrize("q, sigma", [(0.0024, 6), (0.0256, 2.5), (0.08192, 3)])
@pytest.mark.parametrize("alpha", [2, 3, 5, 8])
def test_taylor_and_integer_formulas_agree_within_the_remainder(q, sigma,
                                                                alpha):
  """At an integer order thm 3.1 is the exact H: the Taylor series misses it
  by at most R_m, and series + R_m (thm 3.3) is never below it. Relative
  1e-9 is the round-off of the two computations (R_m = 0 for alpha < m)."""
  series, remainder = fixed_size.taylor_terms(q, sigma, alpha)
  exact = math.expm1(fixed_size.fswor_integer_rdp(q, sigma, alpha)
                     * (alpha - 1))
  assert series + remainder >= exact * (1 - 1e-9)
  assert abs(series - exact) <= remainder + exact * 1e-9


@pytest.mark.parametrize("alpha", [1.5, 2.7, 6.3, 10.9])
def test_fractional_orders_are_bounded_by_the_next_integer_order(alpha):
  """RDP grows with alpha: the curve used never exceeds thm 3.1 at ceil."""
  q, sigma = 0.0256, 2.5
  value = fixed_size.fswor_add_remove_rdp(q, sigma, (alpha,))[0]
  assert value <= fixed_size.fswor_integer_rdp(q, sigma, math.ceil(alpha))
  assert value == pytest.approx(
      min(fixed_size.fswor_taylor_rdp(q, sigma, alpha),
          fixed_size.fswor_integer_rdp(q, sigma, math.ceil(alpha))))


def test_replace_one_leading_order_is_two_q_squared_alpha_over_sigma_squared():
  """Small q: the replace-one bound ~ q^2 alpha (e^(4/s^2) - e^(2/s^2)), and
  FSwoR replace-one matches Poisson replace-one to leading order."""
  q, sigma, alpha = 1e-5, 4.0, 4
  lead = q**2 * alpha * (math.exp(4 / sigma**2) - math.exp(2 / sigma**2))
  fswor = fixed_size.fswor_replace_one_rdp(q, sigma, (alpha,))[0]
  assert fswor == pytest.approx(lead, rel=1e-3)
  poisson = fixed_size.poisson_replace_one_rdp(q, sigma, (alpha,))[0]
  assert poisson == pytest.approx(2 * q**2 * alpha / sigma**2, rel=0.1)


def test_fswr_lower_bound_sits_below_its_upper_bound_and_above_zero():
  orders = (1.5, 2, 4, 8, 16)
  upper = fixed_size.fswr_add_remove_rdp(1797, 64, 3.0, orders)
  lower = fixed_size.fswr_add_remove_rdp_lower(1797, 64, 3.0, orders)
  assert (lower > 0).all() and (lower <= upper).all()
  # FSwR costs at least FSwoR here: repeats move the sum further.
  fswor = fixed_size.fswor_add_remove_rdp(64 / 1797, 3.0, orders)
  assert (upper >= fswor).all()


def test_fswr_at_tan_scale_has_no_useful_rdp_and_the_lower_bound_says_so():
  """B = 4096 draws with replacement: an example drawn B times (chance
  N^-B) moves the sum by 2 B C, and Renyi divergences of order > 1 see it:
  the lower bound alone is astronomical."""
  lower = fixed_size.fswr_add_remove_rdp_lower(50_000, 4096, 3.0, (1.1,))
  assert lower[0] > 1e6
