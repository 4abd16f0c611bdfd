"""Tests of the calculator's what-ifs around a reference triplet."""

import math

import pytest

from tan_tune.errors import ConfigError
from tan_tune.privacy import accounting
from tan_tune.privacy import trial_count
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.privacy import tuning
from tan_tune.privacy import what_if
from tan_tune.privacy.clipping_bound import JlBound
from tan_tune.privacy.sampling_scheme import POISSON, SamplingScheme
from tan_tune.privacy.triplet import PrivacyTriplet

DIGITS = PrivacyTriplet(1437, 512, 3.918, 40)


def test_a_simulations_own_eps_is_never_an_error():
  # JL with r = 4 has no finite eps: inf, not a refusal.
  [row] = what_if.simulation_rows(
      DIGITS, [triplet_lib.simulate(DIGITS, 64)], 1 / 1437,
      SamplingScheme(bound=JlBound(4)))
  assert row["private"] is False and row["compute_saving"] == 8
  assert math.isinf(row["own_epsilon_not_a_guarantee"])


def test_constant_eta_alternatives_and_dataset_scales():
  rows = what_if.alternative_rows(DIGITS, [10, 40], [], 1 / 1437, "rdp",
                                  POISSON)
  assert [r["steps"] for r in rows] == [10, 40]
  assert rows[1]["epsilon"] == pytest.approx(
      accounting.epsilon(DIGITS).epsilon)
  [scaled] = what_if.dataset_scale_rows(DIGITS, [2.0], 1 / 1437, "rdp",
                                        POISSON)
  assert scaled["dataset_size"] == 2874
  assert scaled["epsilon"] < rows[1]["epsilon"]  # q halves.


@pytest.mark.slow
def test_jl_rows_fall_with_r_towards_exact_clipping_above_their_floors():
  rows = what_if.projection_rows(DIGITS, 1 / 1437, [16, 64])
  assert rows[0]["epsilon"] > rows[1]["epsilon"] > rows[1][
      "exact_clipping_epsilon"]
  assert all(r["floor"] < r["epsilon"] for r in rows)


CIFAR = PrivacyTriplet(50_000, 4096, 3.0, 2500)


def test_a_private_search_is_priced_for_every_law_under_both_bounds():
  [row] = what_if.private_search_rows(CIFAR, 1e-5, [10], None)
  laws = [(s["distribution"], s["eta"]) for s in row["searches"]]
  assert laws == [("negative_binomial", -0.5), ("logarithmic", 0),
                  ("negative_binomial", 0.5), ("geometric", 1),
                  ("negative_binomial", 2), ("negative_binomial", 5),
                  ("poisson", None)]
  bounds = {law: (s["rdp_epsilon"], s["profile_epsilon"])
            for law, s in zip(laws, row["searches"])}
  # Both bounds at the reference: RDP (Papernot & Steinke) / profile.
  assert bounds[("logarithmic", 0)] == pytest.approx((10.592, 8.945),
                                                     abs=2e-3)
  assert bounds[("geometric", 1)] == pytest.approx((11.854, 9.422), abs=2e-3)
  assert bounds[("poisson", None)] == pytest.approx((14.511, 11.853),
                                                    abs=2e-3)
  for search in row["searches"]:
    smaller = min(search["rdp_epsilon"], search["profile_epsilon"])
    assert search["epsilon"] == smaller
    assert search["accountant"] == (
        "rdp-repeat-and-select" if search["rdp_epsilon"] == smaller
        else "pld-selection-profile")
    assert search["sigma_for_target"] is None and row["most_room"] is None
  # At the same mean, a larger eta costs more, up to Poisson (eta -> inf).
  family = [s["epsilon"] for s in row["searches"][:-1]]
  assert family == sorted(family)
  report = tuning.search_epsilon(
      CIFAR, 1e-5, trial_count.TrialCount("geometric", 10))
  assert (report.epsilon, report.accountant) == (
      row["searches"][3]["epsilon"], row["searches"][3]["accountant"])


def test_the_scores_noise_adds_to_every_bound():
  public, scored = (what_if.private_search_rows(
      CIFAR, 1e-5, [10], None, noise, shapes=[0.0])[0] for noise in (None, 20))
  assert scored["score_noise"] == 20
  for plain, noisy in zip(public["searches"], scored["searches"]):
    assert noisy["rdp_epsilon"] > plain["rdp_epsilon"]
    assert noisy["profile_epsilon"] > plain["profile_epsilon"]


@pytest.mark.parametrize("shapes, noise, field", [
    ([-1.0], None, "trial_shapes"), ([math.inf], None, "trial_shapes"),
    ([math.nan], None, "trial_shapes"), ([0.0], 0.0, "score_noise"),
    ([0.0], -3.0, "score_noise"),
])
def test_an_eta_or_score_noise_out_of_range_is_refused(shapes, noise, field):
  with pytest.raises(ConfigError) as error:
    what_if.private_search_rows(CIFAR, 1e-5, [10], None, noise, shapes)
  assert error.value.field == field
