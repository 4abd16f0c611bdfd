"""Tests of the calculator's what-ifs around a reference triplet."""

import math

import pytest

from tan_tune.privacy import accounting
from tan_tune.privacy import triplet as triplet_lib
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
