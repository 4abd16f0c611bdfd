"""tan_tune.privacy.trial_count: the law D of a private search's number of
trials K, its masses, draws and pgf derivative phi'."""

import math
import random

import numpy as np
import pytest
from scipy import special
from scipy import stats

from tan_tune.errors import ConfigError
from tan_tune.privacy import trial_count
from tan_tune.privacy.trial_count import TrialCount

# Each a TrialCount's fields; eta in (-1, 0) is the lighter-than-logarithmic
# end of Papernot & Steinke's family (heavier tail, more mass on K = 1).
COUNTS = [
    ("logarithmic", 10.0, None), ("geometric", 4.0, None),
    ("poisson", 6.0, None), ("negative_binomial", 8.0, 2.0),
    ("negative_binomial", 3.0, -0.5), ("negative_binomial", 10.0, -0.5),
    ("negative_binomial", 30.0, -0.25), ("negative_binomial", 5.0, -0.8),
]


def _masses(count, tail=1e-13):
  """(k, P(K = k)) from `log_pmf`, over k up to where the tail (1 - gamma)^k
  is below `tail` (Poisson: up to mean + 40 sd)."""
  if count.eta == math.inf:
    k = np.arange(0, int(count.mean + 40 * math.sqrt(count.mean)) + 40)
  else:
    gamma = count.gamma()
    k = np.arange(1, int(math.log(tail) / math.log1p(-gamma)) + 2)
  return k, np.exp([count.log_pmf(int(i)) for i in k])


@pytest.mark.parametrize("fields", COUNTS[:5])
def test_masses_sum_to_one_with_the_stated_mean(fields):
  count = TrialCount(*fields)
  k, p = _masses(count)
  assert p.sum() == pytest.approx(1.0, abs=1e-9)
  assert np.dot(k, p) == pytest.approx(count.mean, rel=1e-9)


@pytest.mark.parametrize("eta, mean", [(-0.5, 3.0), (-0.5, 10.0),
                                       (-0.25, 30.0), (-0.75, 2.0)])
def test_eta_below_zero_is_a_law_with_the_stated_mean(eta, mean):
  count = TrialCount("negative_binomial", mean, eta)
  gamma = count.gamma()
  # E[K] in closed form (Papernot & Steinke), written apart from the solver.
  assert eta * (1 - gamma) / (gamma * (1 - gamma**eta)) == pytest.approx(
      mean, rel=1e-9)
  k, p = _masses(count)
  assert np.all(p > 0)
  # The masses, from their definition C(k + eta - 1, k) (1 - gamma)^k /
  # (gamma^-eta - 1): both factors are negative for eta in (-1, 0).
  direct = special.binom(k[:50] + eta - 1, k[:50]) * (1 - gamma)**k[:50] / (
      gamma**-eta - 1)
  np.testing.assert_allclose(p[:50], direct, rtol=1e-9)
  assert p.sum() == pytest.approx(1.0, abs=1e-9)
  assert np.dot(k, p) == pytest.approx(mean, rel=1e-9)


def test_special_shapes_are_the_named_laws():
  # eta = 0 is the logarithmic law, eta = 1 the geometric (scipy's masses).
  log, geo = TrialCount("logarithmic", 10.0), TrialCount("geometric", 10.0)
  k = np.arange(1, 40)
  np.testing.assert_allclose(
      np.exp([log.log_pmf(int(i)) for i in k]),
      stats.logser.pmf(k, 1 - log.gamma()), rtol=1e-9)
  np.testing.assert_allclose(
      np.exp([geo.log_pmf(int(i)) for i in k]),
      stats.geom.pmf(k, geo.gamma()), rtol=1e-9)
  nearly_log = TrialCount("negative_binomial", 10.0, 1e-9)
  assert nearly_log.gamma() == pytest.approx(log.gamma(), rel=1e-6)
  assert geo.gamma() == pytest.approx(0.1, rel=1e-12)


@pytest.mark.parametrize("fields", COUNTS)
def test_the_derivative_is_the_series_of_the_masses(fields):
  # phi'(x) = sum_k k P(K = k) x^(k - 1), increasing, phi'(1) = E[K].
  count = TrialCount(*fields)
  x = np.linspace(0.0, 0.99, 12)
  if count.distribution == "negative_binomial" and count.shape == -0.8:
    # gamma ~ 4e-8: the series needs ~1e9 terms at x near 1; x <= 0.99
    # needs only thousands, and phi'(1) = E[K] is checked in closed form.
    k = np.arange(1, 6000)
    p = np.exp([count.log_pmf(int(i)) for i in k])
  else:
    k, p = _masses(count)
    x = np.append(x, 1.0)
  series = np.sum(k * p * x[:, None]**np.maximum(k - 1, 0), axis=1)
  np.testing.assert_allclose(count.derivative(x), series, rtol=1e-8)
  assert count.derivative(1.0) == pytest.approx(count.mean, rel=1e-9)
  assert np.all(np.diff(count.derivative(np.linspace(0, 1, 101))) > 0)


def test_the_derivative_holds_at_one_for_a_tiny_gamma():
  # gamma 6.6e-8: 1 - (1 - gamma) x loses 7 of its digits at x = 1.
  count = TrialCount("negative_binomial", 100.0, -0.7)
  assert count.gamma() < 1e-7
  x = np.array([0.0, 0.5, 1 - 1e-9, 1 - 1e-15, 1.0])
  values = count.derivative(x)
  assert values[-1] == pytest.approx(100.0, rel=1e-12)
  assert np.all(np.diff(values) > 0)
  # phi'(0) = P(K = 1).
  assert values[0] == pytest.approx(math.exp(count.log_pmf(1)), rel=1e-9)


@pytest.mark.parametrize("fields", COUNTS[:5])
def test_draws_have_the_stated_mean_and_support(fields):
  count = TrialCount(*fields)
  k, p = _masses(count)
  sd = math.sqrt(np.dot(k**2, p) - count.mean**2)
  n = 4000
  draws = np.array([count.draw(random.Random(seed)) for seed in range(n)])
  assert draws.min() >= (0 if count.distribution == "poisson" else 1)
  # Five standard errors of the mean, and of the frequency of K = k[0].
  assert draws.mean() == pytest.approx(count.mean, abs=5 * sd / math.sqrt(n))
  first = np.mean(draws == k[0])
  assert first == pytest.approx(p[0], abs=5 * math.sqrt(p[0] * (1 - p[0]) / n))


def test_one_trial_always_when_the_mean_is_one():
  for fields in (("logarithmic", 1.0), ("geometric", 1.0),
                 ("negative_binomial", 1.0, -0.5)):
    count = TrialCount(*fields)
    assert count.gamma() == 1.0 and count.log_pmf(1) == 0.0
    assert count.draw(random.Random(0)) == 1
    np.testing.assert_array_equal(count.derivative([0.0, 0.5, 1.0]), 1.0)


def test_named_shapes_and_distributions():
  assert trial_count.SHAPES == {"logarithmic": 0.0, "geometric": 1.0,
                                "poisson": math.inf}
  assert trial_count.DISTRIBUTIONS == ("logarithmic", "geometric", "poisson",
                                       "negative_binomial")
  assert TrialCount("negative_binomial", 5.0, -0.5).eta == -0.5
  assert TrialCount("poisson", 5.0).describe() == (
      "poisson number of trials (mean 5)")
  assert TrialCount("negative_binomial", 5.0, -0.5).describe() == (
      "negative_binomial number of trials (mean 5, eta -0.5)")


@pytest.mark.parametrize("fields, message", [
    (("uniform", 10.0, None), "trial_count.distribution"),
    (("logarithmic", 0.5, None), "trial_count.mean"),
    (("logarithmic", trial_count.MAX_MEAN_TRIALS + 1, None),
     "trial_count.mean"),
    (("negative_binomial", 10.0, None), "trial_count.shape"),
    (("geometric", 10.0, 2.0), "trial_count.shape"),
    (("negative_binomial", 10.0, -1.0), "trial_count.shape"),
    (("negative_binomial", 10.0, -2.0), "trial_count.shape"),
    (("negative_binomial", 10.0, math.nan), "trial_count.shape"),
    (("negative_binomial", 10.0, math.inf), "trial_count.shape"),
    # E[K] ~ |eta| gamma^-(1 + eta): gamma would underflow.
    (("negative_binomial", 10.0, -0.999), "trial_count.shape"),
    (("negative_binomial", 10_000.0, -0.99), "trial_count.shape"),
    # gamma 3.8e-11: K's tail would reach 2.6e10 trials.
    (("negative_binomial", 10.0, -0.9), "trial_count.shape"),
])
def test_bad_trial_counts_name_their_field(fields, message):
  with pytest.raises(ConfigError, match=message) as error:
    TrialCount(*fields)
  assert error.value.field == message
