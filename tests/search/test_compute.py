"""Tests of the compute model: a candidate reference run's cost C = B'_ref S
K, the budget filter on the steps searched, and the front of score against
cost."""

import pytest

from tan_tune.errors import ConfigError
from tan_tune.search import compute


def test_a_run_costs_its_example_passes():
  assert compute.reference_examples(4096, 600) == 2_457_600
  assert compute.reference_examples(4096, 600, multiplicity=2) == 4_915_200


def test_more_steps_at_constant_eta_cost_as_their_square_root():
  # B'_ref = 4096 sqrt(600 / 2400) = 2048: 4x the steps, 2x the compute.
  assert compute.candidate_examples(4096, 600, 2400) == 2048 * 2400
  assert compute.candidate_examples(4096, 600, 2400) == 2 * (
      compute.candidate_examples(4096, 600, 600))


def test_the_budget_keeps_the_steps_that_fit_at_the_largest_k():
  budget = compute.ComputeBudget(examples=5_000_000)
  grid = (600, 1200, 2400, 4800)
  # K = 1: 2.46M, 3.48M, 4.92M fit; 4800 steps (6.95M) does not.
  assert compute.affordable_steps(budget, 4096, 600, grid, 1) == (
      600, 1200, 2400)
  # K = 2 doubles every cost: only 600 steps (4.92M) fits.
  assert compute.affordable_steps(budget, 4096, 600, grid, 2) == (600,)


def test_a_budget_nothing_fits_names_the_cheapest_candidate():
  with pytest.raises(ConfigError) as error:
    compute.affordable_steps(compute.ComputeBudget(1e6), 4096, 600,
                             (600, 2400), 1)
  assert error.value.field == "compute_budget.examples"
  assert "2,457,600" in error.value.allowed


@pytest.mark.parametrize("examples", [0, -1, True, "1e6"])
def test_a_budget_is_a_positive_number(examples):
  with pytest.raises(ConfigError) as error:
    compute.ComputeBudget(examples)
  assert error.value.field == "compute_budget.examples"


def test_the_front_holds_the_points_nothing_cheaper_beats():
  points = [(1, 0.80), (2, 0.85), (2, 0.83), (3, 0.84), (4, 0.90),
            (1, None), (5, 0.90)]
  assert compute.pareto_front(points) == [
      True, True, False, False, True, False, False]


def test_the_front_of_a_metric_to_minimise():
  points = [(1, 0.5), (2, 0.4), (3, 0.45)]
  assert compute.pareto_front(points, maximise=False) == [True, True, False]


def test_equal_points_are_both_on_the_front():
  assert compute.pareto_front([(2, 0.8), (2, 0.8)]) == [True, True]
