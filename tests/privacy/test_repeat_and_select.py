"""tan_tune.privacy.repeat_and_select: Papernot & Steinke's RDP of the best
of K runs, against dp_accounting, the paper's formula written out, and the
exact Renyi divergences of small selections."""

import itertools
import math

from dp_accounting.rdp import rdp_privacy_accountant
import numpy as np
import pytest
from scipy import special

from tan_tune.privacy import mechanisms
from tan_tune.privacy.repeat_and_select import selection_rdp
from tan_tune.privacy.trial_count import TrialCount

ORDERS = np.asarray(mechanisms.RDP_ORDERS)
# Two base curves: 30 Gaussian steps of sigma 2 (alpha / 8 each) and 300
# Poisson-subsampled ones (q 0.05, sigma 1): the exact series.
GAUSSIAN = 30 * ORDERS / 8
SUBSAMPLED = 300 * mechanisms.poisson_rdp(0.05, 1.0)


def _count(eta, mean):
  if eta == math.inf:
    return TrialCount("poisson", mean)
  return TrialCount("negative_binomial", mean, eta)


@pytest.mark.parametrize("eta", [0.0, 0.5, 1.0, 3.0, math.inf])
@pytest.mark.parametrize("mean", [1.5, 5.0, 10.0, 300.0])
@pytest.mark.parametrize("base", [GAUSSIAN, SUBSAMPLED])
def test_matches_dp_accounting_where_both_apply(eta, mean, base):
  ours = selection_rdp(ORDERS, base, _count(eta, mean))
  theirs = rdp_privacy_accountant._compute_rdp_repeat_and_select(  # pylint: disable=protected-access
      list(ORDERS), list(base), mean, eta)
  # dp_accounting finds gamma to a relative 1e-9 (its log to ~1e-9), which
  # moves the bound by at most (1 + eta) 1e-9 / lambda_hat; Poisson is its.
  tolerance = 0.0 if eta == math.inf else (1 + eta) * 2e-9
  np.testing.assert_allclose(ours, theirs, rtol=0, atol=tolerance)


def _paper(orders, base, eta, mean):
  """Theorem 2 as printed, one (lambda, lambda_hat) pair at a time, gamma
  solved from E[K] = eta (1 - gamma) / (gamma (1 - gamma^eta)) here."""
  gamma = 10**_bisect(lambda lg: eta * (1 - 10**lg) / (
      10**lg * (1 - 10**(eta * lg))) - mean, -300.0, -1e-12)
  out = []
  for lam, eps in zip(orders, base):
    best = min(
        eps + (1 + eta) * (1 - 1 / lam_hat) * eps_hat
        + (1 + eta) * math.log(1 / gamma) / lam_hat + math.log(mean) / (lam - 1)
        for lam_hat, eps_hat in zip(orders, base))
    out.append(best)
  # RDP is non-decreasing in the order: each takes the best above it.
  return [min(out[i:]) for i in range(len(out))]


def _bisect(f, low, high):
  """The root of f, positive at `low` and negative at `high`."""
  for _ in range(200):
    middle = (low + high) / 2
    low, high = (middle, high) if f(middle) > 0 else (low, middle)
  return (low + high) / 2


@pytest.mark.parametrize("eta", [-0.8, -0.5, -0.25, 0.5, 2.0])
@pytest.mark.parametrize("mean", [3.0, 10.0])
def test_matches_the_papers_formula_at_every_eta(eta, mean):
  # dp_accounting refuses eta < 0; theorem 2 holds for every eta > -1.
  for base in (GAUSSIAN, SUBSAMPLED):
    ours = selection_rdp(ORDERS, base, _count(eta, mean))
    np.testing.assert_allclose(ours, _paper(ORDERS, base, eta, mean),
                               rtol=1e-9)


def _pgf(count):
  """phi(x) = E[x^K] from K's masses (`log_pmf`), tail below 1e-14."""
  if count.eta == math.inf:
    return lambda x: np.exp(count.mean * (np.asarray(x) - 1))
  gamma = count.gamma()
  k = np.arange(1, int(math.log(1e-14) / math.log1p(-gamma)) + 2)
  p = np.exp([count.log_pmf(int(i)) for i in k])
  return lambda x: np.sum(p * np.asarray(x, float)[..., None]**k, axis=-1)


def _renyi(orders, p, q):
  """D_alpha(p || q) at each order, for masses p, q > 0."""
  logs = (orders[:, None] * np.log(p) + (1 - orders[:, None]) * np.log(q))
  return special.logsumexp(logs, axis=1) / (orders - 1)


def _selection(p, order, phi):
  """The best of K draws from masses p, ranked `order` (last best), and
  for Poisson K = 0's empty output: phi(F(<= i)) - phi(F(< i))."""
  below = np.concatenate([[0.0], np.cumsum(p[list(order)])])
  masses = phi(below[1:]) - phi(below[:-1])
  nothing = phi(0.0)
  return np.append(masses, nothing) if nothing > 0 else masses


def _randomized_response(eps, outputs):
  p = np.full(outputs, 1.0)
  p[0] = math.exp(eps)
  q = np.roll(p, 1)
  return p / p.sum(), q / q.sum()


def _discrete_gaussian(sigma, points):
  x = np.arange(points) - points // 2
  p, q = np.exp(-x**2 / (2 * sigma**2)), np.exp(-(x - 1)**2 / (2 * sigma**2))
  return p / p.sum(), q / q.sum()


PAIRS = [_randomized_response(1.0, 2), _randomized_response(2.0, 4),
         _discrete_gaussian(1.0, 5), _discrete_gaussian(3.0, 5)]


@pytest.mark.parametrize("eta", [-0.5, 0.0, 1.0, 3.0, math.inf])
@pytest.mark.parametrize("mean", [2.0, 10.0])
def test_never_below_the_exact_divergence_of_a_selection(eta, mean):
  # The independent check at every eta: the exact RDP of the best of K
  # runs of a finite mechanism, over every ranking and both directions,
  # below the bound from the base's exact RDP.
  count = _count(eta, mean)
  phi = _pgf(count)
  orders = ORDERS[ORDERS <= 256]  # Far enough: the bound is flat beyond.
  for p, q in PAIRS:
    base = np.maximum(_renyi(orders, p, q), _renyi(orders, q, p))
    bound = selection_rdp(orders, base, count)
    assert np.all(bound >= base)
    for ranking in itertools.permutations(range(len(p))):
      mp, mq = _selection(p, ranking, phi), _selection(q, ranking, phi)
      exact = np.maximum(_renyi(orders, mp, mq), _renyi(orders, mq, mp))
      assert np.all(exact <= bound + 1e-9), (eta, mean, ranking)


def test_at_the_same_mean_a_larger_eta_costs_more_at_every_order():
  # Proven, not observed: with g = log(1/gamma) and u = (1 + eta) g,
  # E[K] = (e^g - 1)/g * (u - g)/(1 - e^(g - u)); at fixed u it rises with
  # g (its log-derivative is 1 + (Lang(g/2) + Lang((u - g)/2))/2 > 0, Lang
  # the odd increasing Langevin function, |u - g| < g), so it falls as eta
  # rises, and a fixed E[K] needs a larger u. Theorem 2's free term
  # (1 + eta)(1 - 1/lambda_hat) eps_hat + u / lambda_hat then rises with
  # eta at each lambda_hat, and the bound with it at every order.
  for mean in (3.0, 10.0, 100.0):
    counts = [_count(eta, mean) for eta in (-0.7, -0.5, 0.0, 0.5, 1.0, 3.0)]
    u = [(1 + c.eta) * -math.log(c.gamma()) for c in counts]
    assert u == sorted(u) and len(set(u)) == len(u)
    for base in (GAUSSIAN, SUBSAMPLED):
      curves = [selection_rdp(ORDERS, base, c) for c in counts]
      for lighter, heavier in zip(curves, curves[1:]):
        assert np.all(lighter < heavier)


@pytest.mark.parametrize("eta", [-0.5, 0.0, 1.0, math.inf])
def test_more_trials_cost_more_at_every_order(eta):
  # log E[K] / (lambda - 1) and log(1/gamma) rise with E[K] (TNB), as
  # E[K] delta_hat and log E[K] (Poisson).
  curves = [selection_rdp(ORDERS, SUBSAMPLED, _count(eta, mean))
            for mean in (1.5, 3.0, 10.0, 30.0)]
  for fewer, more in zip(curves, curves[1:]):
    assert np.all(fewer < more)


def test_orders_below_one_are_no_free_order():
  # Theorem 2 takes lambda_hat >= 1; at an order below 1 the term
  # (1 - 1/lambda_hat) eps_hat is negative and would lower the bound.
  count = _count(0.0, 10.0)
  with_low = np.concatenate([[0.5], ORDERS])
  base = np.concatenate([[50.0], SUBSAMPLED])
  bound = selection_rdp(with_low, base, count)
  assert bound[0] == bound[1]  # Order 0.5 takes the bound above it.
  np.testing.assert_array_equal(bound[1:],
                                selection_rdp(ORDERS, SUBSAMPLED, count))


def test_the_orders_may_come_in_any_order():
  count = _count(-0.5, 10.0)
  shuffled = np.random.default_rng(62).permutation(len(ORDERS))
  np.testing.assert_array_equal(
      selection_rdp(ORDERS[shuffled], SUBSAMPLED[shuffled], count),
      selection_rdp(ORDERS, SUBSAMPLED, count)[shuffled])


def test_one_trial_costs_the_base_and_its_free_term_only():
  # E[K] = 1 (gamma = 1): no log E[K], free term min (1 + eta)(1 - 1/l) eps.
  count = TrialCount("logarithmic", 1.0)
  free = np.min((1 - 1 / ORDERS) * SUBSAMPLED)
  np.testing.assert_allclose(selection_rdp(ORDERS, SUBSAMPLED, count),
                             SUBSAMPLED + free, rtol=1e-12)
