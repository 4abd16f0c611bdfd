"""tan_tune.privacy.audit: the one-run lower bound on epsilon."""

import math

import numpy as np
import pytest
from scipy import stats

from tan_tune.errors import ConfigError
from tan_tune.privacy import audit


@pytest.mark.parametrize("guesses, correct, expected", [
    # m = 1000 canaries, delta = 1e-5, 95% confidence (Steinke et al.'s
    # (eps, delta) bound, computed independently).
    (100, 100, 3.47), (500, 500, 5.09), (1000, 1000, 5.78), (100, 90, 1.63),
    (100, 80, 0.96),
])
def test_reference_values(guesses, correct, expected):
  assert audit.epsilon_lower_bound(1000, guesses, correct, 1e-5) == (
      pytest.approx(expected, abs=0.01))


def test_pure_dp_p_value_is_the_binomial_tail():
  p = math.exp(1.0) / (1 + math.exp(1.0))
  assert audit.p_value(200, 50, 40, 1.0, 0.0) == pytest.approx(
      stats.binom.sf(39, 50, p))
  # delta only adds to it.
  assert audit.p_value(200, 50, 40, 1.0, 1e-5) > audit.p_value(
      200, 50, 40, 1.0, 0.0)


def test_the_bound_grows_with_right_guesses_and_is_capped_by_the_ceiling():
  bounds = [audit.epsilon_lower_bound(1000, 100, v, 1e-5)
            for v in (50, 60, 80, 95, 100)]
  assert bounds == sorted(bounds) and bounds[0] == 0.0
  assert bounds[-1] == audit.ceiling(1000, 100, 1e-5)
  # A coin's worth of right guesses certifies nothing.
  assert audit.epsilon_lower_bound(1000, 1000, 500, 1e-5) == 0.0


def test_a_bound_above_eps_is_rare_for_a_mechanism_that_is_eps_dp():
  """Randomized response at eps = 1 is exactly 1-DP: its W ~ Bin(r, p(1)).
  Summed exactly over W, the bound exceeds 1 with probability at most 5% at
  95% confidence."""
  p = math.exp(1.0) / (1 + math.exp(1.0))
  over = sum(stats.binom.pmf(v, 200, p) for v in range(201)
             if audit.epsilon_lower_bound(200, 200, v, 0.0) > 1.0)
  assert 0.01 < over <= 0.05


def test_guesses_take_the_highest_and_lowest_scores():
  scores = np.array([0.9, -0.5, 0.1, 0.8, -0.7, 0.0])
  included = np.array([True, False, True, False, False, True])
  made = audit.guess(scores, included, k_plus=2, k_minus=2)
  assert made.guessed.tolist() == [1, -1, 0, 1, -1, 0]
  assert made.count == 4 and made.correct == 3


@pytest.mark.parametrize("call", [
    lambda: audit.p_value(10, 11, 5, 1.0, 0.0),
    lambda: audit.p_value(10, 5, 6, 1.0, 0.0),
    lambda: audit.guess(np.zeros(3), np.ones(3, bool), 2, 2),
    lambda: audit.epsilon_lower_bound(10, 5, 5, 0.0, confidence=1.0),
])
def test_impossible_counts_are_refused(call):
  with pytest.raises(ConfigError):
    call()
