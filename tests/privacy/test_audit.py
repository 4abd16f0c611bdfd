"""tan_tune.privacy.audit: the one-run lower bound on epsilon."""

import math

import numpy as np
import pytest
from scipy import optimize
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


@pytest.mark.parametrize("canaries, guesses, correct, delta, published", [
    (1000, 10, 10, 1e-5, 1.2260),
    (1000, 15, 15, 1e-5, 1.8776),
    (1000, 25, 25, 1e-5, 2.7534),
    (1000, 40, 40, 1e-5, 3.6179),
    (100, 80, 70, 1e-6, 3.2906),
])
def test_the_fdp_bound_matches_the_authors_reference_implementation(
    canaries, guesses, correct, delta, published):
  """Outputs published with the f-DP audit's reference implementation (the
  tutorial of Meta's PrivacyGuard, by the paper's group), which searches
  sigma = 1 / mu on a grid of step 0.01: its eps lies below the exact one by
  at most the grid's step in eps, under 0.006 here."""
  found = audit.fdp_epsilon_lower_bound(canaries, guesses, correct, delta)
  assert published - 1e-4 <= found <= published + 0.006


def test_the_fdp_bound_certifies_more_from_the_same_guesses():
  for guesses, correct in ((100, 100), (200, 153), (1000, 700)):
    steinke = audit.epsilon_lower_bound(1000, guesses, correct, 1e-5)
    fdp = audit.fdp_epsilon_lower_bound(1000, guesses, correct, 1e-5)
    assert fdp > steinke > 0, (guesses, correct)
  assert audit.fdp_epsilon_lower_bound(1000, 100, 50, 1e-5) == 0.0
  values = [audit.fdp_epsilon_lower_bound(1000, 100, c, 1e-5)
            for c in range(60, 101, 10)]
  assert values == sorted(values) and values[0] < values[-1]


def test_the_fdp_bound_rarely_passes_eps_for_a_gaussian_mechanism():
  """Each canary's score is mu [S_i = +1] + N(0, 1): exactly mu-GDP in S_i.
  Over 200 seeded audits the f-DP bound passes the mechanism's eps at
  delta = 1e-5 in at most 5% of them, as at 95% confidence it must."""
  mu, delta, m = 1.0, 1e-5, 1000
  epsilon = optimize.brentq(
      lambda e: audit._gdp_mu(e, delta) - mu, 1e-3, 50)  # pylint: disable=protected-access
  rng = np.random.default_rng(0)
  over = 0
  for _ in range(200):
    included = rng.random(m) < 0.5
    scores = mu * included + rng.standard_normal(m)
    made = audit.guess(scores, included, 50, 50)
    over += audit.fdp_epsilon_lower_bound(m, made.count, made.correct,
                                          delta) > epsilon
  assert over <= 10
