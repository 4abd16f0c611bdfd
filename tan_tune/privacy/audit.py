"""An empirical lower bound on epsilon from one training run.

Steinke, Nasr & Jagielski, "Privacy Auditing with One (1) Training Run"
(NeurIPS 2023). m canaries; canary i is trained on iff S_i = +1, S_i drawn
uniformly from {-1, +1} in secret. After training the auditor scores every
canary (larger: looks included), guesses T_i = +1 for the k+ highest
scores and T_i = -1 for the k- lowest, abstains on the rest: r = k+ + k-
guesses, W of them right.

If training is (eps, delta)-DP, W given r is, up to delta, stochastically
dominated by Binomial(r, p), p = e^eps / (1 + e^eps) (theorem 3.1 for pure
DP, theorem 5.2 with delta). The p-value of W >= v correct guesses is

    P[Bin(r, p) >= v] + 2 m delta max_{1 <= i <= v} P[v - i <= Bin(r, p) < v] / i,

and eps_lb at confidence 1 - beta is the largest eps whose p-value is at
most beta: were the run (eps_lb, delta)-DP, seeing this many right guesses
would have had probability at most beta. A correct implementation therefore
shows eps_lb <= eps (its accountant's) except with probability beta; a
bug that leaks more shows above it.

The bound can never exceed the ceiling: eps_lb of r right guesses out of r.
With few guesses the ceiling is low (m = 1000, delta = 1e-5, 95%: 3.47 for
100 of 100), so an audit can only catch a mechanism claimed below it.

`fdp_epsilon_lower_bound` reads the same guesses with the f-DP analysis of
Mahloujifar, Melis & Chaudhuri ("Auditing f-Differential Privacy in One
Run", ICML 2025) against Gaussian-DP trade-off curves, and certifies more.
"""

import dataclasses
import math

import numpy as np
from scipy import optimize
from scipy import special
from scipy import stats

from tan_tune.errors import ConfigError

# eps past this is indistinguishable from no privacy with any feasible m.
_MAX_EPSILON = 100.0


def p_value(canaries: int, guesses: int, correct: int, epsilon: float,
            delta: float) -> float:
  """P-value of `correct` right guesses of `guesses` among `canaries` m,
  under the hypothesis that the run is (epsilon, delta)-DP."""
  _require_counts(canaries, guesses, correct)
  p = 1.0 / (1.0 + math.exp(-epsilon))
  tail = float(stats.binom.sf(correct - 1, guesses, p))
  if delta == 0 or correct == 0:
    return min(1.0, tail)
  # P[v - i <= Bin < v] for i = 1..v, from the cdf below v.
  below = stats.binom.cdf(correct - 1, guesses, p)
  lower = stats.binom.cdf(np.arange(correct - 2, -2, -1), guesses, p)
  windows = (below - lower) / np.arange(1, correct + 1)
  return min(1.0, tail + 2 * canaries * delta * float(windows.max()))


def epsilon_lower_bound(canaries: int, guesses: int, correct: int,
                        delta: float, confidence: float = 0.95) -> float:
  """The largest eps rejected at `confidence`; 0 when not even eps = 0 is."""
  if not 0 < confidence < 1:
    raise ConfigError("confidence", confidence, "a number in (0, 1)")
  beta = 1 - confidence

  def gap(epsilon: float) -> float:
    return p_value(canaries, guesses, correct, epsilon, delta) - beta

  if gap(0.0) > 0:
    return 0.0
  if gap(_MAX_EPSILON) <= 0:
    return _MAX_EPSILON
  return float(optimize.brentq(gap, 0.0, _MAX_EPSILON, xtol=1e-6))


def ceiling(canaries: int, guesses: int, delta: float,
            confidence: float = 0.95) -> float:
  """The most any audit of `guesses` guesses can certify: all of them right."""
  return epsilon_lower_bound(canaries, guesses, guesses, delta, confidence)


def fdp_epsilon_lower_bound(canaries: int, guesses: int, correct: int,
                            delta: float, confidence: float = 0.95) -> float:
  """eps_lb of the f-DP one-run audit (Mahloujifar, Melis & Chaudhuri, ICML
  2025), for the Gaussian-DP curves: the largest eps whose mu-GDP
  hypothesis, mu set so that mu-GDP is (eps, delta)-DP, is rejected at
  `confidence`. It reads the same guesses as `epsilon_lower_bound` and
  certifies more, because a mu-GDP mechanism is held to its whole
  trade-off curve instead of one (eps, delta) pair."""
  _require_counts(canaries, guesses, correct)
  if not 0 < confidence < 1:
    raise ConfigError("confidence", confidence, "a number in (0, 1)")
  beta = 1 - confidence

  def rejected(epsilon: float) -> bool:
    return _gdp_rejected(canaries, guesses, correct,
                         _gdp_mu(epsilon, delta), beta)

  if correct == 0 or not rejected(0.0):
    return 0.0
  low, high = 0.0, 1.0
  while rejected(high):
    if high >= _MAX_EPSILON:
      return _MAX_EPSILON
    low, high = high, 2 * high
  while high - low > 1e-6:
    middle = (low + high) / 2
    low, high = (middle, high) if rejected(middle) else (low, middle)
  return low


def _gdp_rejected(canaries: int, guesses: int, correct: int, mu: float,
                  beta: float) -> bool:
  """Whether `correct` right of `guesses` rejects mu-GDP at level beta.

  The paper's recursion over i = c - 1, ..., 0 of two masses: r, of the
  guesses that are right, and h, of those that are wrong, starting from
  beta c / m and beta (c' - c) / m. A mu-GDP mechanism makes a wrong guess
  at least as likely as f^-1(r) = Phi(Phi^-1(r) - mu) (the trade-off
  curve), and each raise of h raises r by i / (c' - i) times as much. The
  hypothesis is rejected when r + h passes c' / m: then c or more right
  answers among c' had probability at most beta.
  """
  right = beta * correct / canaries
  wrong = beta * (guesses - correct) / canaries
  for i in range(correct - 1, -1, -1):
    raised = max(wrong, float(special.ndtr(special.ndtri(min(right, 1.0))
                                           - mu)))
    right = min(1.0, right + i / (guesses - i) * (raised - wrong))
    wrong = raised
  return right + wrong > guesses / canaries


def _gdp_mu(epsilon: float, delta: float) -> float:
  """The mu at which mu-GDP is exactly (epsilon, delta)-DP:
  delta = Phi(-eps / mu + mu / 2) - e^eps Phi(-eps / mu - mu / 2)."""
  def excess(mu: float) -> float:
    return (special.ndtr(-epsilon / mu + mu / 2)
            - math.exp(epsilon) * special.ndtr(-epsilon / mu - mu / 2)
            - delta)

  high = 1.0
  while excess(high) < 0:
    high *= 2
  return float(optimize.brentq(excess, 1e-9, high, xtol=1e-12))


@dataclasses.dataclass(frozen=True)
class Guesses:
  """The auditor's guesses from canary scores.

  Attributes:
    guessed: T_i in {-1, 0, +1} per canary (0: abstained).
    correct: W, the number of i with T_i = S_i.
  """

  guessed: np.ndarray
  correct: int

  @property
  def count(self) -> int:
    """r, the number of guesses made."""
    return int(np.count_nonzero(self.guessed))


def guess(scores: np.ndarray, included: np.ndarray, k_plus: int,
          k_minus: int) -> Guesses:
  """T_i = +1 for the k+ highest scores, -1 for the k- lowest, 0 otherwise,
  scored against the secret S_i (`included`, True for +1)."""
  scores = np.asarray(scores, dtype=float)
  if k_plus < 0 or k_minus < 0 or k_plus + k_minus > len(scores):
    raise ConfigError("guesses", (k_plus, k_minus),
                      f"k+ and k- >= 0 with k+ + k- <= m = {len(scores)}")
  order = np.argsort(scores, kind="stable")
  guessed = np.zeros(len(scores), dtype=int)
  guessed[order[len(scores) - k_plus:]] = 1
  guessed[order[:k_minus]] = -1
  truth = np.where(np.asarray(included, dtype=bool), 1, -1)
  return Guesses(guessed, int(np.sum(guessed == truth)))


def _require_counts(canaries: int, guesses: int, correct: int) -> None:
  if not 0 <= correct <= guesses <= canaries:
    raise ConfigError("guesses", (canaries, guesses, correct),
                      "0 <= correct <= guesses <= canaries")


@dataclasses.dataclass(frozen=True)
class Bound:
  """What one audit certifies.

  Attributes:
    canaries: m.
    guesses: r.
    correct: W.
    epsilon_lower_bound: eps_lb at `confidence`.
    ceiling: the largest eps_lb r guesses could certify (all right).
    fdp_epsilon_lower_bound: the f-DP audit's eps_lb from the same guesses.
    fdp_ceiling: the most it could certify.
    delta: of the bound: the audited run's delta.
    confidence: 1 - beta.
  """

  canaries: int
  guesses: int
  correct: int
  epsilon_lower_bound: float
  ceiling: float
  fdp_epsilon_lower_bound: float
  fdp_ceiling: float
  delta: float
  confidence: float

  def as_dict(self) -> dict[str, float]:
    return dataclasses.asdict(self)


def bound(scores: np.ndarray, included: np.ndarray, guesses: int,
          delta: float, confidence: float = 0.95) -> Bound:
  """Guesses r / 2 in (highest scores) and r - r / 2 out (lowest), and the
  eps_lb their right answers certify."""
  half = guesses // 2
  made = guess(scores, included, half, guesses - half)
  canaries = len(made.guessed)
  return Bound(
      canaries=canaries, guesses=made.count, correct=made.correct,
      epsilon_lower_bound=epsilon_lower_bound(
          canaries, made.count, made.correct, delta, confidence),
      ceiling=ceiling(canaries, made.count, delta, confidence),
      fdp_epsilon_lower_bound=fdp_epsilon_lower_bound(
          canaries, made.count, made.correct, delta, confidence),
      fdp_ceiling=fdp_epsilon_lower_bound(canaries, made.count, made.count,
                                          delta, confidence),
      delta=delta, confidence=confidence)
