"""tan_tune.privacy.tuning: the price of choosing hyper-parameters privately."""

import math
import random

import pytest

from tan_tune.errors import ConfigError
from tan_tune.privacy import trial_count
from tan_tune.privacy import tuning
from tan_tune.privacy.clipping_bound import JlBound
from tan_tune.privacy.sampling_scheme import SamplingScheme
from tan_tune.privacy.triplet import PrivacyTriplet

# TAN's CIFAR-10 reference run (N, B, sigma, S), priced as Papernot & Steinke
# (ICLR 2022) price a private random search.
TAN_CIFAR = PrivacyTriplet(50_000, 4096, 3.0, 2500)


def _count(distribution, mean=10.0, shape=None):
  return trial_count.TrialCount(distribution, mean, shape)


def test_a_gaussian_repeated_matches_the_notes_values():
  # A Gaussian of sigma 2 is one step at q = 1 (B = N).
  gaussian = PrivacyTriplet(1000, 1000, 2.0, 1)
  assert tuning.composed_runs_epsilon(gaussian, 1e-6, 1) == pytest.approx(
      2.4215, abs=0.05)
  for distribution, expected in (("logarithmic", 3.8711), ("geometric", 4.5477),
                                 ("poisson", 5.1819)):
    eps = tuning.search_epsilon(gaussian, 1e-6, _count(distribution)).epsilon
    assert eps == pytest.approx(expected, abs=0.05), distribution


def test_tan_cifar_with_ten_expected_trials_matches_the_note():
  # The exact series at fractional orders (the free order is often below 2);
  # dp_accounting's looser one gave 10.60, 12.08 and 15.87.
  for distribution, expected in (("logarithmic", 10.59), ("geometric", 11.85),
                                 ("poisson", 14.51)):
    report = tuning.search_epsilon(TAN_CIFAR, 1e-5, _count(distribution))
    assert report.epsilon == pytest.approx(expected, abs=0.05), distribution
    assert report.accountant == tuning.ACCOUNTANT
  assert tuning.composed_runs_epsilon(TAN_CIFAR, 1e-5, 10) == pytest.approx(
      29.84, abs=0.05)


def test_sigma_for_a_target_brings_the_search_back_to_it():
  # The note: staying at eps 8 with 10 expected trials needs sigma 3.90.
  sigma = tuning.calibrate_search_sigma(8.0, TAN_CIFAR, 1e-5,
                                        _count("logarithmic"))
  assert sigma == pytest.approx(3.90, abs=0.02)
  at = PrivacyTriplet(50_000, 4096, sigma, 2500)
  assert tuning.search_epsilon(at, 1e-5, _count("logarithmic")).epsilon <= 8.0


@pytest.mark.parametrize("scheme", [
    SamplingScheme("fixed"), SamplingScheme("truncated-poisson"),
    SamplingScheme(adjacency="replace-one"), SamplingScheme(bound=JlBound(32))])
def test_other_schemes_are_refused_with_their_reason(scheme):
  with pytest.raises(ConfigError, match="RepeatAndSelectDpEvent is RDP only"):
    tuning.require_search_scheme(scheme)


def test_a_negative_binomial_lies_between_logarithmic_and_geometric():
  eps = {d: tuning.search_epsilon(TAN_CIFAR, 1e-5, c).epsilon for d, c in (
      ("log", _count("logarithmic")), ("nb", _count("negative_binomial", 10, 0.5)),
      ("geo", _count("geometric")))}
  assert eps["log"] < eps["nb"] < eps["geo"]


@pytest.mark.parametrize("count", [
    trial_count.TrialCount("logarithmic", 10), trial_count.TrialCount("geometric", 4),
    trial_count.TrialCount("poisson", 6), trial_count.TrialCount("negative_binomial", 8, 2.0),
])
@pytest.mark.slow
def test_draws_have_the_stated_mean_and_support(count):
  rng = random.Random(0)
  draws = [count.draw(rng) for _ in range(20_000)]
  assert min(draws) >= (0 if count.distribution == "poisson" else 1)
  # Standard error of the mean below 0.1 here: 5 of them is a wide margin.
  assert sum(draws) / len(draws) == pytest.approx(count.mean, abs=0.5)
  total = sum(math.exp(count.log_pmf(k)) for k in range(0, 2000))
  assert total == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("fields, message", [
    (("uniform", 10.0, None), "trial_count.distribution"),
    (("logarithmic", 0.5, None), "trial_count.mean"),
    (("negative_binomial", 10.0, None), "trial_count.shape"),
    (("geometric", 10.0, 2.0), "trial_count.shape"),
])
def test_bad_trial_counts_name_their_field(fields, message):
  with pytest.raises(ConfigError, match=message):
    trial_count.TrialCount(*fields)
