"""tan_tune.privacy.selection_profile: the privacy profile of the best of K
runs, checked against exact selections, closed forms and the RDP bound."""

import itertools
import math

from dp_accounting.pld import privacy_loss_distribution as pld_lib
import numpy as np
import pytest
from scipy import stats

from tan_tune.privacy import accountant_registry
from tan_tune.privacy import selection_profile as sp
from tan_tune.privacy import tuning
from tan_tune.privacy.trial_count import TrialCount
from tan_tune.privacy.triplet import PrivacyTriplet

# TAN's CIFAR-10 reference run (N, B, sigma, S) and its delta.
TAN_CIFAR = PrivacyTriplet(50_000, 4096, 3.0, 2500)
CIFAR_Q = 4096 / 50_000
RDP_BOUND, PROFILE_BOUND = "rdp-repeat-and-select", "pld-selection-profile"


@pytest.fixture(scope="module")
def cifar():
  return sp.trial_pld(CIFAR_Q, 3.0, 2500)


def _pmf(distribution, mean):
  """K's masses from scipy (k, P(K = k)), gamma from TrialCount: both
  written apart from the module under test."""
  if distribution == "poisson":
    k = np.arange(0, 200)
    return k, stats.poisson.pmf(k, mean)
  gamma = TrialCount(distribution, mean).gamma()
  k = np.arange(1, 3000)
  if distribution == "logarithmic":
    return k, stats.logser.pmf(k, 1 - gamma)
  return k, stats.geom.pmf(k, gamma)


def _pgf(k, p, x):
  return np.sum(p * np.asarray(x, float)[..., None]**k, axis=-1)


def _pgf_derivative(distribution, mean):
  """phi' in closed form (checked against the masses in a test below)."""
  if distribution == "poisson":
    return lambda x: mean * np.exp(mean * (x - 1))
  gamma = TrialCount(distribution, mean).gamma()
  if distribution == "logarithmic":
    return lambda x: (1 - gamma) / -math.log(gamma) / (1 - (1 - gamma) * x)
  return lambda x: gamma / (1 - (1 - gamma) * x)**2


COUNTS = [("logarithmic", 10.0), ("geometric", 5.0), ("poisson", 4.0)]


EXACT_LAWS = [*(f"{d} {m:g}" for d, m in COUNTS), "eta -0.5 4", "fixed 3",
              "binomial 5 0.4"]


def _law_and_masses(name):
  """(law, k, P(K = k)) for the exact selections: the named laws (scipy's
  masses), eta = -0.5 (`log_pmf`'s, checked in test_trial_count), K fixed
  and binomial."""
  for distribution, mean in COUNTS:
    if name == f"{distribution} {mean:g}":
      return TrialCount(distribution, mean), *_pmf(distribution, mean)
  if name == "eta -0.5 4":
    law = TrialCount("negative_binomial", 4.0, -0.5)
    k = np.arange(1, 2000)  # (1 - gamma)^2000 < 1e-17.
    return law, k, np.exp([law.log_pmf(int(i)) for i in k])
  if name == "fixed 3":
    return sp.fixed(3), np.array([3]), np.array([1.0])
  k = np.arange(0, 6)
  return sp.binomial(5, 0.4), k, stats.binom.pmf(k, 5, 0.4)


def _finite_pld(px, py, interval=1e-4):
  """The PLD of the ordered pair (upper px, lower py)."""
  return pld_lib.from_two_probability_mass_functions(
      {i: math.log(v) for i, v in enumerate(py)},
      {i: math.log(v) for i, v in enumerate(px)},
      value_discretization_interval=interval)


def _randomized_response(eps, outputs):
  p = np.full(outputs, 1.0)
  p[0] = math.exp(eps)
  return p / p.sum(), np.roll(p, 1) / p.sum()


def _discrete_gaussian(sigma, points):
  x = np.arange(points) - points // 2
  p, q = np.exp(-x**2 / (2 * sigma**2)), np.exp(-(x - 1)**2 / (2 * sigma**2))
  return p / p.sum(), q / q.sum()


def _exact_finite(px, py, order, k, p, epsilons):
  """delta at each eps of the best of K runs over finitely many outputs
  ranked `order`: P(M = the i-th) = phi(F(<= i)) - phi(F(< i)), exactly
  (K = 0's empty output gives both the same mass)."""
  fx = np.concatenate([[0.0], np.cumsum(np.asarray(px)[list(order)])])
  fy = np.concatenate([[0.0], np.cumsum(np.asarray(py)[list(order)])])
  mx = _pgf(k, p, fx[1:]) - _pgf(k, p, fx[:-1])
  my = _pgf(k, p, fy[1:]) - _pgf(k, p, fy[:-1])
  return np.sum(np.maximum(
      mx - np.exp(np.asarray(epsilons))[:, None] * my, 0.0), axis=1)


def _exact_gaussian(mx, my, derivative, eps, rotation=None, points=200_001):
  """delta(M(X) || M(Y)) for a score y ~ N(mx, 1) against N(my, 1), the best
  ranked by y, or, with `rotation` b, the scores above b ranked below those
  under it: int [q_X phi'(F_X) - e^eps q_Y phi'(F_Y)]_+ dy, numerically."""
  edge = 12 + abs(mx) + abs(my)
  blocks = ([(-edge, edge)] if rotation is None
            else [(rotation, edge), (-edge, rotation)])
  total, below_x, below_y = 0.0, 0.0, 0.0
  for low, high in blocks:
    y = np.linspace(low, high, points)
    fx = below_x + stats.norm.cdf(y, mx) - stats.norm.cdf(low, mx)
    fy = below_y + stats.norm.cdf(y, my) - stats.norm.cdf(low, my)
    gap = (stats.norm.pdf(y, mx) * derivative(fx)
           - math.exp(eps) * stats.norm.pdf(y, my) * derivative(fy))
    total += np.trapezoid(np.maximum(gap, 0.0), y)
    below_x, below_y = fx[-1], fy[-1]
  return float(total)


@pytest.mark.parametrize("distribution, mean", COUNTS)
def test_the_closed_form_pgf_derivatives_match_the_masses(distribution, mean):
  k, p = _pmf(distribution, mean)
  x = np.linspace(0, 1, 11)
  expected = np.sum(p * k * x[:, None]**np.maximum(k - 1, 0), axis=-1)
  assert _pgf_derivative(distribution, mean)(x) == pytest.approx(expected,
                                                                rel=1e-9)
  law = TrialCount(distribution, mean)
  assert law.derivative(x) == pytest.approx(expected, rel=1e-9)
  assert law.mean == pytest.approx(mean, rel=1e-9)


def test_one_trial_is_the_base_mechanism(cifar):
  base = cifar.get_epsilon_for_delta(1e-5)
  for law in (sp.fixed(1), sp.binomial(1, 1.0), TrialCount("logarithmic", 1),
              TrialCount("geometric", 1),
              TrialCount("negative_binomial", 1, -0.5)):
    value = sp.epsilon(cifar, law, 1e-5)
    assert base <= value <= base + 2 * sp.EPSILON_TOLERANCE


# (*)'s sup over t near 1 steps 1 - t by 6.5% (512 points over 14
# decades), which costs up to (eta + 1) log 1.065 where phi' turns below the
# uniform grid's 1/2048 (gamma 2.8e-6 here): eps 1.5265.
_COARSE_TOP = pytest.mark.xfail(
    strict=True, reason="the sup's grid near t = 1 is too coarse for gamma"
    " 2.8e-6: eps 1.5265, above (eta + 2) eps-hat = 1.5")


@pytest.mark.parametrize("eta, mean", [
    *itertools.product([0.0, 0.5, 1.0, 2.0], [3.0, 30.0, 300.0]),
    (-0.5, 3.0), (-0.5, 30.0), pytest.param(-0.5, 300.0, marks=_COARSE_TOP)])
def test_a_pure_dp_base_gives_papernot_and_steinkes_corollary(eta, mean):
  # Randomized response at eps-hat = 1: (eta + 2) eps-hat-DP whatever E[K]
  # (Papernot & Steinke; 3 eps-hat, Liu & Talwar's, for the geometric),
  # eta in (-1, 0) too. Slack: the PLD's 1e-4 rounding, scaled by eta + 2,
  # and the sup's grid.
  base = _finite_pld(*_randomized_response(1.0, 2))
  law = TrialCount("negative_binomial", mean, eta)
  value = sp.epsilon(base, law, 1e-12)
  assert value <= (eta + 2) * (1 + 1e-4) + 0.01
  assert sp.delta(base, law, (eta + 2) * (1 + 1e-4) + 0.01) == 0.0


@pytest.mark.parametrize("name", EXACT_LAWS)
def test_never_below_an_exact_selection_over_every_ranking(name):
  # Small finite mechanisms (random pairs, randomized response, a discrete
  # Gaussian), every ranking of their outputs, a grid of eps: the exact
  # delta of the selection, brute force, never above the bound's.
  law, k, p = _law_and_masses(name)
  rng = np.random.default_rng(62)
  pairs = [tuple(rng.dirichlet(np.ones(4)) for _ in range(2))
           for _ in range(6)]
  pairs += [_randomized_response(1.0, 2), _randomized_response(0.5, 4),
            _discrete_gaussian(1.0, 4), _discrete_gaussian(0.5, 4)]
  epsilons = [0.0, 0.25, 0.5, 1.0, 2.0, 3.0]
  for px, py in pairs:
    for upper, lower in ((px, py), (py, px)):
      base = _finite_pld(upper, lower)
      bound = [sp.delta(base, law, eps) for eps in epsilons]
      exact = np.max([_exact_finite(upper, lower, order, k, p, epsilons)
                      for order in itertools.permutations(range(len(upper)))],
                     axis=0)
      assert np.all(np.asarray(bound) >= exact - 1e-12)


@pytest.mark.parametrize("distribution, mean", COUNTS)
@pytest.mark.parametrize("mu", [0.5, 1.0])
def test_never_below_an_exact_selection_of_gaussian_scores(distribution, mean,
                                                           mu):
  derivative = _pgf_derivative(distribution, mean)
  law = TrialCount(distribution, mean)
  base = pld_lib.from_gaussian_mechanism(1.0, sensitivity=mu,
                                         value_discretization_interval=1e-4)
  for eps in (1.0, 2.0, 3.0):
    bound = sp.delta(base, law, eps)
    for rotation in (None, -1.3, 0.0, 1.0):
      for mx, my in ((mu, 0.0), (0.0, mu), (-mu, 0.0), (0.0, -mu)):
        exact = _exact_gaussian(mx, my, derivative, eps, rotation, 20_001)
        # The integral's error is far below 1e-9 on this grid.
        assert bound >= exact - 1e-9, (eps, rotation, mx, my)


def test_is_within_hundredths_of_a_selection_it_bounds():
  # Gaussian scores of mu = 0.5 (a sigma = 2 Gaussian) and K logarithmic
  # with mean 10, ranked with the scores above -1.3 below the rest (the
  # worst rotation found numerically): that selection needs eps 2.834 at
  # delta 1e-5, so no bound from the base's profile alone can go lower.
  base = pld_lib.from_gaussian_mechanism(2.0,
                                         value_discretization_interval=1e-4)
  law = TrialCount("logarithmic", 10.0)
  value = sp.epsilon(base, law, 1e-5)
  assert value == pytest.approx(2.847, abs=0.005)
  exact = _exact_gaussian(0.5, 0.0, _pgf_derivative("logarithmic", 10.0),
                          value - 0.03, -1.3)
  assert exact > 1e-5
  # The RDP bound is above that selection too, and above the profile's.
  search = tuning.search_event(PrivacyTriplet(1000, 1000, 2.0, 1), law)
  rdp = accountant_registry.named(RDP_BOUND).epsilon([search], 1e-5)
  assert rdp > value


@pytest.mark.parametrize("distribution, eta", [
    ("logarithmic", None), ("geometric", None), ("poisson", None),
    ("negative_binomial", -0.5)])
def test_more_trials_cost_more(cifar, distribution, eta):
  # Proven for each family: phi'_1(x) / m_1 = phi'_2(A(x)) / m_2 for
  # means m_1 < m_2, with A(x) = 1 - theta (1 - x), theta in (0, 1) (the
  # size-biased K - 1 is a negative binomial or a Poisson, its smaller mean
  # a binomial thinning of its larger). The trade-off curve l is convex
  # with l(1) <= 1, so l(A(t)) <= A(l(t)): every term of (*)'s sup for m_1
  # is at most m_1 / m_2 times one for m_2, and delta_1 <= delta_2.
  values = [sp.epsilon(cifar, TrialCount(distribution, mean, eta), 1e-5)
            for mean in (2, 5, 10, 30)]
  assert values == sorted(values) and len(set(values)) == len(values)


def test_at_the_same_mean_eta_does_not_order_the_bound():
  # Unlike the RDP bound (test_repeat_and_select), (*) is not ordered by
  # eta at a fixed E[K], and Poisson is not always dearest: for randomized
  # response at eps-hat 0.1 over 10 outputs, at E[K] = 2 the geometric costs
  # least, eta = -0.5 most; at E[K] = 3 Poisson least. Each gap (2e-3 or
  # more) moves by under 2e-4 on a grid ten times finer or with four times
  # more points of t.
  base = _finite_pld(*_randomized_response(0.1, 10))

  def eps(mean, *law):
    return sp.epsilon(base, TrialCount(*law[:1], mean, *law[1:]), 1e-5)

  lightest, log, geometric = (eps(2.0, "negative_binomial", -0.5),
                              eps(2.0, "logarithmic"), eps(2.0, "geometric"))
  assert geometric + 0.001 < log and log + 0.001 < lightest
  poisson = eps(3.0, "poisson")
  assert all(poisson + 0.002 < eps(3.0, *law) for law in (
      ("negative_binomial", -0.5), ("logarithmic",), ("geometric",)))


# TAN CIFAR-10, delta 1e-5: the profile bound computed here (1e-3 grid; a
# grid ten times finer and a sup over four times the points of t lower it
# by at most 0.003) and Papernot & Steinke's RDP bound.
CIFAR_TABLE = [
    ("logarithmic", 10, 8.945, 10.59), ("logarithmic", 30, 9.858, 11.58),
    ("geometric", 10, 9.422, 11.85), ("geometric", 30, 10.727, 13.47),
    ("poisson", 10, 11.853, 14.51),
]


@pytest.mark.parametrize("distribution, mean, profile, rdp", CIFAR_TABLE)
def test_tan_cifar_reference_reports_the_profile_below_rdp(distribution, mean,
                                                           profile, rdp):
  count = TrialCount(distribution, mean)
  search = tuning.search_event(TAN_CIFAR, count)
  rdp_value = accountant_registry.named(RDP_BOUND).epsilon([search], 1e-5)
  assert rdp_value == pytest.approx(rdp, abs=0.01)
  report = tuning.search_epsilon(TAN_CIFAR, 1e-5, count)
  assert report.epsilon == pytest.approx(profile, abs=0.005)
  assert report.epsilon < rdp_value and report.accountant == PROFILE_BOUND


def test_the_accountant_builds_the_trials_pld_itself(cifar):
  # Its time is a benchmark's to measure, never a test's to assert.
  count = TrialCount("logarithmic", 10.0)
  value = accountant_registry.named(PROFILE_BOUND).epsilon(
      [tuning.search_event(TAN_CIFAR, count)], 1e-5)
  assert value == pytest.approx(sp.epsilon(cifar, count, 1e-5), abs=1e-12)
  assert value == pytest.approx(8.945, abs=0.005)


def test_a_noisy_score_adds_its_gaussian_to_every_trial(cifar):
  # The trial with its score dominates the trial alone (drop the score),
  # and a noisier score is dominated by a less noisy one: eps never falls,
  # up to the bisection's rounding up of each figure (EPSILON_TOLERANCE).
  law = TrialCount("logarithmic", 10.0)
  plain = sp.epsilon(cifar, law, 1e-5)
  scored = [sp.epsilon(sp.trial_pld(CIFAR_Q, 3.0, 2500, s), law, 1e-5)
            for s in (5.0, 50.0, 5000.0)]
  slack = sp.EPSILON_TOLERANCE
  assert scored[0] > scored[1] + 0.05 and scored[1] >= scored[2] - slack
  assert scored[2] >= plain - slack
  assert abs(scored[2] - plain) < 1e-3


def test_a_shift_of_log_rho_bounds_the_profile_from_above(cifar):
  for law in (TrialCount("logarithmic", 10.0), TrialCount("geometric", 30.0),
              TrialCount("poisson", 10.0),
              TrialCount("negative_binomial", 10.0, -0.5)):
    assert sp.epsilon(cifar, law, 1e-5) <= sp.shift_epsilon(cifar, law, 1e-5)


def test_out_of_range_deltas_are_refused(cifar):
  for delta in (0.0, 1.0, -1e-5):
    with pytest.raises(ValueError, match="delta"):
      sp.epsilon(cifar, TrialCount("logarithmic", 10.0), delta)
