"""tan_tune.privacy.tuning: the price of choosing hyper-parameters privately."""

import dataclasses

import pytest

from tan_tune.errors import ConfigError
from tan_tune.privacy import accountant_registry
from tan_tune.privacy import accountants
from tan_tune.privacy import tuning
from tan_tune.privacy.clipping_bound import JlBound
from tan_tune.privacy.sampling_scheme import SamplingScheme
from tan_tune.privacy.trial_count import TrialCount
from tan_tune.privacy.triplet import PrivacyTriplet

# TAN's CIFAR-10 reference run (N, B, sigma, S), priced as Papernot & Steinke
# (ICLR 2022) price a private random search.
TAN_CIFAR = PrivacyTriplet(50_000, 4096, 3.0, 2500)
RDP_BOUND, PROFILE_BOUND = accountants.SELECTION_BOUNDS


def _count(distribution, mean=10.0, shape=None):
  return TrialCount(distribution, mean, shape)


def _rdp(triplet, delta, count, score_noise=None):
  """The RDP bound alone, which the search reports only when it wins."""
  return accountant_registry.named(RDP_BOUND).epsilon(
      [tuning.search_event(triplet, count, score_noise)], delta)


def _profile(triplet, delta, count, score_noise=None):
  return accountant_registry.named(PROFILE_BOUND).epsilon(
      [tuning.search_event(triplet, count, score_noise)], delta)


def test_a_gaussian_repeated_matches_the_notes_values():
  # A Gaussian of sigma 2 is one step at q = 1 (B = N).
  gaussian = PrivacyTriplet(1000, 1000, 2.0, 1)
  assert tuning.composed_runs_epsilon(gaussian, 1e-6, 1) == pytest.approx(
      2.4215, abs=0.05)
  for distribution, expected in (("logarithmic", 3.8711), ("geometric", 4.5477),
                                 ("poisson", 5.1819)):
    count = _count(distribution)
    rdp = _rdp(gaussian, 1e-6, count)
    assert rdp == pytest.approx(expected, abs=0.05), distribution
    # The search reports the smaller of both bounds, and names it.
    report = tuning.search_epsilon(gaussian, 1e-6, count)
    profile = _profile(gaussian, 1e-6, count)
    assert report.epsilon == min(rdp, profile) == profile
    assert report.accountant == PROFILE_BOUND


def test_tan_cifar_with_ten_expected_trials_matches_the_note():
  # RDP: the exact series at fractional orders (the free order is often
  # below 2); dp_accounting's looser one gave 10.60, 12.08 and 15.87. The
  # profile bound is smaller at each, and is what the search reports.
  for distribution, rdp, profile in (("logarithmic", 10.59, 8.945),
                                     ("geometric", 11.85, 9.422),
                                     ("poisson", 14.51, 11.853)):
    count = _count(distribution)
    assert _rdp(TAN_CIFAR, 1e-5, count) == pytest.approx(rdp, abs=0.05)
    report = tuning.search_epsilon(TAN_CIFAR, 1e-5, count)
    assert report.epsilon == pytest.approx(profile, abs=0.005), distribution
    assert report.accountant == PROFILE_BOUND
    assert report.sampling == "Poisson sampling at q = B/N"
  assert tuning.composed_runs_epsilon(TAN_CIFAR, 1e-5, 10) == pytest.approx(
      29.84, abs=0.05)


def test_sigma_for_a_target_brings_the_search_back_to_it():
  # The note: staying at eps 8 with 10 expected trials needs sigma 3.90
  # under RDP; the tighter profile bound needs only 3.297.
  count = _count("logarithmic")
  assert _rdp(dataclasses.replace(TAN_CIFAR, noise_multiplier=3.90), 1e-5,
              count) <= 8.0 < _rdp(dataclasses.replace(
                  TAN_CIFAR, noise_multiplier=3.88), 1e-5, count)
  sigma = tuning.calibrate_search_sigma(8.0, TAN_CIFAR, 1e-5, count)
  assert sigma == pytest.approx(3.297, abs=0.002)
  at = dataclasses.replace(TAN_CIFAR, noise_multiplier=sigma)
  assert tuning.search_epsilon(at, 1e-5, count).epsilon <= 8.0
  # The smallest such sigma, to its rounding up (1e-4).
  below = dataclasses.replace(TAN_CIFAR, noise_multiplier=sigma - 1e-3)
  assert tuning.search_epsilon(below, 1e-5, count).epsilon > 8.0


def test_a_scored_search_needs_more_noise():
  # Each trial's score (noise 5) composed in: more than the 3.297 above.
  count = _count("logarithmic")
  scored = tuning.calibrate_search_sigma(8.0, TAN_CIFAR, 1e-5, count,
                                         score_noise=5.0)
  assert scored > 3.297 + 0.01
  for sigma, within in ((scored, True), (scored - 1e-3, False)):
    at = dataclasses.replace(TAN_CIFAR, noise_multiplier=sigma)
    eps = tuning.search_epsilon(at, 1e-5, count, 5.0).epsilon
    assert (eps <= 8.0) == within


def test_an_unreachable_target_is_refused():
  with pytest.raises(ConfigError, match="target epsilon"):
    tuning.calibrate_search_sigma(0.0, TAN_CIFAR, 1e-5, _count("logarithmic"))
  with pytest.raises(ConfigError, match="a budget this search can reach"):
    tuning.calibrate_search_sigma(1e-4, TAN_CIFAR, 1e-5,
                                  _count("logarithmic"))


@pytest.mark.parametrize("scheme", [
    SamplingScheme("fixed"), SamplingScheme("truncated-poisson"),
    SamplingScheme(adjacency="replace-one"), SamplingScheme(bound=JlBound(32))])
def test_other_schemes_are_refused_with_their_reason(scheme):
  with pytest.raises(ConfigError, match="the selection bounds know that"
                     " trial only") as error:
    tuning.require_search_scheme(scheme)
  assert error.value.field == "tuning_privacy"


def test_the_rdp_bound_rises_with_eta_at_the_same_mean():
  # Proven at every order (test_repeat_and_select), so at the converted eps
  # too. The profile bound, and so the search's figure, has no such order
  # (test_selection_profile).
  eps = [_rdp(TAN_CIFAR, 1e-5, _count("negative_binomial", 10.0, eta))
         for eta in (-0.5, 0.0, 0.5, 1.0)]
  assert eps == sorted(eps) and len(set(eps)) == len(eps)
  assert eps[1] == _rdp(TAN_CIFAR, 1e-5, _count("logarithmic"))
  assert eps[3] == _rdp(TAN_CIFAR, 1e-5, _count("geometric"))


def test_the_search_event_is_the_whole_search():
  count = _count("negative_binomial", 8.0, -0.5)
  event = tuning.search_event(TAN_CIFAR, count, 50.0)
  assert event == accountants.SearchEvent(accountants.RunEvent(TAN_CIFAR),
                                          count, 50.0)
  with pytest.raises(ConfigError, match="delta"):
    tuning.search_epsilon(TAN_CIFAR, 0.0, count)
