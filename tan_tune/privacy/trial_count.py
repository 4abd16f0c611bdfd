"""The law D of a private random search's number of trials K.

Papernot & Steinke (ICLR 2022) draw K from a truncated negative binomial
D(eta, gamma), eta > -1, 0 < gamma < 1:

    P(K = k) = C(k + eta - 1, k) (1 - gamma)^k / (gamma^-eta - 1),  k >= 1,
    E[K] = eta (1 - gamma) / (gamma (1 - gamma^eta)),

whose limit eta -> 0 is the logarithmic law, P(K = k) = (1 - gamma)^k /
(k log(1/gamma)), E[K] = (1 - gamma) / (gamma log(1/gamma)); eta = 1 is the
geometric law. K ~ Poisson(mu) (eta = inf in dp_accounting's spelling) may
draw K = 0. A search names D by its mean; gamma follows.

Both selection bounds read D through its probability generating function
phi(x) = E[x^K]: the RDP bound (`repeat_and_select.py`) through eta and
gamma, the privacy-profile bound (`selection_profile.py`) through

    phi'(x) = E[K] (gamma / (1 - (1 - gamma) x))^(eta + 1)   (TNB),
    phi'(x) = mu e^{mu (x - 1)}                              (Poisson),

both increasing on [0, 1] with phi'(1) = E[K].
"""

import dataclasses
import functools
import math
import random

import numpy as np
from scipy import optimize

from tan_tune.errors import ConfigError

# eta of each named distribution of K; a negative binomial gives its own.
SHAPES = {"logarithmic": 0.0, "geometric": 1.0, "poisson": math.inf}
DISTRIBUTIONS = (*SHAPES, "negative_binomial")
# K is drawn by inverse cdf; the search refuses means past this.
MAX_MEAN_TRIALS = 10_000
# The smallest gamma allowed: K's tail reaches about 1/gamma trials, which a
# search would have to run when drawn (eta near -1 gives a tiny gamma).
_LOG_GAMMA_FLOOR = math.log(1e-9)


@dataclasses.dataclass(frozen=True)
class TrialCount:
  """The distribution D of K, as a search file names it.

  Attributes:
    distribution: `logarithmic` (eta = 0), `geometric` (eta = 1), `poisson`,
      or `negative_binomial` with its `shape` eta > -1.
    mean: E[K], at least 1.
    shape: eta, for `negative_binomial` only.
  """

  distribution: str = "logarithmic"
  mean: float = 10.0
  shape: float | None = None

  def __post_init__(self):
    if self.distribution not in DISTRIBUTIONS:
      raise ConfigError("trial_count.distribution", self.distribution,
                        f"one of {', '.join(DISTRIBUTIONS)}")
    if not 1 <= self.mean <= MAX_MEAN_TRIALS:
      raise ConfigError("trial_count.mean", self.mean,
                        f"a number in [1, {MAX_MEAN_TRIALS}]")
    negative_binomial = self.distribution == "negative_binomial"
    if negative_binomial and not (self.shape is not None
                                  and -1 < self.shape < math.inf):
      raise ConfigError(
          "trial_count.shape", self.shape,
          "a number eta > -1 for a negative_binomial distribution (0 is the"
          " logarithmic law, 1 the geometric)")
    if not negative_binomial and self.shape is not None:
      raise ConfigError("trial_count.shape", self.shape,
                        f"only a negative_binomial has one, not {self.distribution}")
    if negative_binomial and self.shape < 0:
      self.gamma()  # Refused here, not in the accountant, if out of reach.

  @property
  def eta(self) -> float:
    return SHAPES.get(self.distribution, self.shape)

  def describe(self) -> str:
    shape = f", eta {self.shape:g}" if self.shape is not None else ""
    return f"{self.distribution} number of trials (mean {self.mean:g}{shape})"

  def log_pmf(self, k: int) -> float:
    """log P(K = k); K >= 1, except that Poisson(mu) may draw 0."""
    if self.eta == math.inf:
      mu = self.mean
      return k * math.log(mu) - mu - math.lgamma(k + 1)
    if k < 1:
      return -math.inf
    gamma = self.gamma()
    if gamma == 1:
      return 0.0 if k == 1 else -math.inf
    if self.eta == 0:
      return (k * math.log1p(-gamma) - math.log(k)
              - math.log(-math.log(gamma)))
    eta = self.eta
    return (math.lgamma(k + eta) - math.lgamma(k + 1) - math.lgamma(eta + 1)
            + math.log(abs(eta)) + k * math.log1p(-gamma)
            - math.log(abs(math.expm1(-eta * math.log(gamma)))))

  def draw(self, rng: random.Random) -> int:
    """K by inverse cdf. Give it random.SystemRandom() for a real search."""
    u, k, total = rng.random(), (0 if self.eta == math.inf else 1), 0.0
    while True:
      total += math.exp(self.log_pmf(k))
      if u < total or total > 1 - 1e-15:
        return k
      k += 1

  def gamma(self) -> float:
    """The halting probability gamma of D(eta, gamma) with E[K] = mean
    (1 for K = 1 always)."""
    if self.mean == 1:
      return 1.0
    gamma = _gamma(float(self.eta), float(self.mean))
    if gamma is None:
      # E[K] ~ |eta| gamma^-(1 + eta) as eta -> -1: gamma vanishes.
      raise ConfigError(
          "trial_count.shape", self.shape,
          f"an eta farther from -1 for a mean of {self.mean:g} (its gamma"
          f" would be below {math.exp(_LOG_GAMMA_FLOOR):g}, and K's tail"
          " would reach a billion trials)")
    return gamma

  def derivative(self, x: np.ndarray) -> np.ndarray:
    """phi'(x), increasing on [0, 1], phi'(1) = E[K]."""
    x = np.asarray(x, float)
    if self.eta == math.inf:
      return self.mean * np.exp(self.mean * (x - 1))
    gamma = self.gamma()
    if gamma == 1:
      return np.ones_like(x)
    # 1 - (1 - gamma) x written without its cancellation at x = 1, where it
    # is gamma (below 1e-16 for eta near -1).
    return self.mean * (gamma / ((1 - x) + gamma * x))**(self.eta + 1)


@functools.lru_cache(maxsize=256)
def _gamma(eta: float, mean: float) -> float | None:
  """gamma of D(eta, gamma) with E[K] = mean > 1; None below the floor.
  Cached: a draw walks K's masses one k at a time."""

  def gap(log_gamma: float) -> float:
    gamma = math.exp(log_gamma)
    if eta == 0:
      log_mean = math.log((1 - gamma) / (gamma * -log_gamma))
    else:
      log_mean = math.log(eta * (1 - gamma)
                          / (gamma * -math.expm1(eta * log_gamma)))
    return log_mean - math.log(mean)

  if gap(_LOG_GAMMA_FLOOR) < 0:
    return None
  return math.exp(optimize.brentq(gap, _LOG_GAMMA_FLOOR, -1e-12, xtol=1e-14,
                                  rtol=1e-13))
