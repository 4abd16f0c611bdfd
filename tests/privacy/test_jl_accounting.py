"""Tests of the JL-clipping accountant against reference values computed
independently from the DP-SGD-JL paper's mixture bound."""

import math

import numpy as np
import pytest

from tan_tune.privacy import jl_accounting

CIFAR = (0.08192, 3.0, 2500, 1e-5)
IMAGENET = (0.02558, 2.5, 18_000, 8e-7)


@pytest.mark.slow
@pytest.mark.parametrize("setting, projections, expected", [
    (CIFAR, 10, 8.04), (CIFAR, 32, 7.07), (CIFAR, 100, 6.86),
    (IMAGENET, 10, 10.81), (IMAGENET, 32, 8.19), (IMAGENET, 100, 7.94),
])
def test_reproduces_the_notes_values(setting, projections, expected):
  assert jl_accounting.jl_epsilon(*setting, projections) == pytest.approx(
      expected, abs=0.05)


def exact_clipping(q, sigma, steps, delta):
  return jl_accounting.composed_epsilon(((q, sigma, steps, None),), delta)


@pytest.mark.parametrize("setting, plain", [(CIFAR, 6.60), (IMAGENET, 7.64)])
def test_exact_clipping_on_the_same_grid_reproduces_the_note(setting, plain):
  assert exact_clipping(*setting) == pytest.approx(plain, abs=0.05)


@pytest.mark.slow
def test_tends_to_exact_clipping_as_r_grows_and_stays_above_the_floor():
  q, sigma, _, delta = CIFAR
  plain = exact_clipping(*CIFAR)
  values = [jl_accounting.jl_epsilon(*CIFAR, r) for r in (10, 32, 100, 1000)]
  assert values == sorted(values, reverse=True)
  for r, value in zip((10, 32, 100, 1000), values):
    assert plain < value
    assert jl_accounting.jl_floor(q, sigma, delta, r) < value
  # The grid rounds Z_r up by at most its ratio; a finer one at large r
  # comes down to exact clipping.
  fine = jl_accounting.jl_epsilon(*CIFAR, 20_000, grid_ratio=1.002)
  assert plain < fine < plain + 0.03


@pytest.mark.parametrize("projections", [1, 2, 4])
@pytest.mark.slow
def test_small_r_gives_no_finite_epsilon_but_a_floor(projections):
  assert jl_accounting.jl_epsilon(*CIFAR, projections) == math.inf
  q, sigma, _, delta = CIFAR
  assert math.isfinite(jl_accounting.jl_floor(q, sigma, delta, projections))


def test_the_floors_of_the_note():
  # r = 4: CIFAR >= 5.4, ImageNet >= 17.4.
  q, sigma, _, delta = CIFAR
  assert jl_accounting.jl_floor(q, sigma, delta, 4) == pytest.approx(5.4,
                                                                     abs=0.05)
  q, sigma, _, delta = IMAGENET
  assert jl_accounting.jl_floor(q, sigma, delta, 4) == pytest.approx(17.4,
                                                                     abs=0.05)


@pytest.mark.parametrize("projections", [1, 4, 32])
def test_z_cdf_is_the_law_of_the_norm_ratio(projections):
  """|g| / M for M^2 = mean_j <g, v_j>^2, v_j ~ N(0, I): 20,000 draws."""
  rng = np.random.default_rng(0)
  g = rng.normal(size=50)
  probes = rng.normal(size=(20_000, projections, 50))
  ratio = np.linalg.norm(g) / np.sqrt(((probes @ g) ** 2).mean(axis=1))
  for z in (0.8, 1.0, 1.5, 3.0):
    # Binomial standard error <= 0.0036: 5 of them.
    assert (ratio <= z).mean() == pytest.approx(
        jl_accounting.z_cdf(z, projections), abs=0.018)


def test_composition_of_a_jl_run_with_an_exact_one_lies_between_and_below_the_sum():
  digits = (512 / 1437, 3.918, 40, 1 / 1437)
  q, sigma, steps, delta = digits
  jl = jl_accounting.jl_epsilon(*digits, 32)
  exact = exact_clipping(*digits)
  both = jl_accounting.composed_epsilon(
      ((q, sigma, steps, 32), (q, sigma, steps, None)), delta)
  assert max(jl, exact) < both < jl + exact
  # A JL run with too few projections makes the composition infinite too.
  assert jl_accounting.composed_epsilon(
      ((q, sigma, steps, 4), (q, sigma, steps, None)), delta) == math.inf
