"""The privacy of the search itself: what choosing hyper-parameters costs.

TAN accounts the promoted run only. Its trials train on the private data
without a guarantee, so the released model is DP end to end only if its
hyper-parameters were chosen privately too (Papernot & Steinke, ICLR 2022,
show that choices made non-privately can leak). A search says how it tunes
with `tuning_privacy` (its strategies are `search/modes.py`'s):

* `non_private` (TAN's practice, the default): trials are simulations; the
  search is not accounted, and every eps shown says so;
* `public_data`: the search runs on a dataset declared public, other than the
  private one; the end-to-end eps is the promoted run's;
* `private_random_search`: K ~ D trials, each a DP run M at the reference
  triplet with hyper-parameters drawn independently of the data and of each
  other, each scored on data outside the training set (the test split),
  only the best released. If M is (lambda, eps_hat)-RDP at every order, the
  whole search is, at each lambda (Papernot & Steinke, theorems 2 and 6),

    D = truncated negative binomial(eta, gamma), mean E[K]:
      eps'(lambda) = eps_hat(lambda) + (1 + eta)(1 - 1/lambda_hat) eps_hat(lambda_hat)
                     + (1 + eta) log(1/gamma) / lambda_hat + log E[K] / (lambda - 1),
    D = Poisson(mu):
      eps'(lambda) = eps_hat(lambda) + mu delta_hat + log(mu) / (lambda - 1),

  (eta = 0 is the logarithmic distribution, eta = 1 the geometric) minimised
  over the free order lambda_hat (resp. the delta_hat of M at
  eps = log(1 + 1/(lambda - 1))), then converted to (eps, delta). The sum
  does not hold if K, the other trials, or any choice adapted to their
  results (TPE, cross-trial early stopping) is published: K is drawn once
  from the OS's secret randomness and kept with the search's secrets.

The accountant engine (`accountants.py`, `rdp-repeat-and-select`) does the
arithmetic with dp_accounting's repeat-and-select (M: DP-SGD's
Poisson-subsampled Gaussian, add/remove-one, composed over S steps) applied
to the exact RDP curve of the subsampled Gaussian (`sampled_gaussian.py`),
the same curve every RDP eps of a Poisson run uses. Exactness matters here:
the free order lambda_hat is often below 2, where dp_accounting's own curve
(its series' terms in absolute value) is loosest: 70% above the exact value
at alpha = 1.1 in TAN's CIFAR setting. (DP-SGD's own eps is barely moved:
its best order is higher.)
"""

import dataclasses
import math
import random

from scipy import optimize

from tan_tune.errors import ConfigError
from tan_tune.privacy import accountant_registry
from tan_tune.privacy import accountants
from tan_tune.privacy import accounting
from tan_tune.privacy import sampling_scheme
from tan_tune.privacy.triplet import PrivacyTriplet, require_delta

# The search this accounting covers, as a search file's `tuning_privacy`
# names it (its strategy, `search/modes.py`, and the errors here).
PRIVATE_RANDOM_SEARCH = "private_random_search"
# The accountant of a private random search, as reports name it.
ACCOUNTANT = "rdp-repeat-and-select"
# eta of each distribution of K; a negative binomial gives its own.
_SHAPES = {"logarithmic": 0.0, "geometric": 1.0, "poisson": math.inf}
DISTRIBUTIONS = (*_SHAPES, "negative_binomial")
# K is drawn by inverse cdf; the search refuses means past this.
MAX_MEAN_TRIALS = 10_000


@dataclasses.dataclass(frozen=True)
class TrialCount:
  """The distribution D of a private random search's number of trials K.

  Attributes:
    distribution: `logarithmic` (cheapest in eps for a given mean),
      `geometric`, `poisson`, or `negative_binomial` with `shape` eta > 0.
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
                                  and 0 < self.shape < math.inf):
      raise ConfigError("trial_count.shape", self.shape,
                        "a positive number for a negative_binomial distribution")
    if not negative_binomial and self.shape is not None:
      raise ConfigError("trial_count.shape", self.shape,
                        f"only a negative_binomial has one, not {self.distribution}")

  @property
  def eta(self) -> float:
    return _SHAPES.get(self.distribution, self.shape)

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
    if self.eta == 0:  # (1 - gamma)^k / (k log(1/gamma))
      return (k * math.log1p(-gamma) - math.log(k)
              - math.log(-math.log(gamma)))
    # C(k + eta - 1, k) (1 - gamma)^k / (gamma^-eta - 1)
    eta = self.eta
    return (math.lgamma(k + eta) - math.lgamma(k + 1) - math.lgamma(eta)
            + k * math.log1p(-gamma) - math.log(math.expm1(-eta * math.log(gamma))))

  def draw(self, rng: random.Random) -> int:
    """K by inverse cdf. Give it random.SystemRandom() for a real search."""
    u, k, total = rng.random(), (0 if self.eta == math.inf else 1), 0.0
    while True:
      total += math.exp(self.log_pmf(k))
      if u < total or total > 1 - 1e-15:
        return k
      k += 1

  def gamma(self) -> float:
    """The halting probability gamma of D(eta, gamma) with E[K] = mean."""
    if self.mean == 1:
      return 1.0
    return optimize.brentq(lambda g: self._mean_at(g) - self.mean,
                           1e-12, 1 - 1e-12, xtol=1e-15, rtol=1e-12)

  def _mean_at(self, gamma: float) -> float:
    eta = self.eta
    if eta == 0:
      return (1 - gamma) / (gamma * -math.log(gamma))
    return eta * (1 - gamma) / (gamma * -math.expm1(eta * math.log(gamma)))


def require_search_scheme(scheme: sampling_scheme.SamplingScheme) -> None:
  """Private random searches are accounted for Poisson add/remove-one with
  exact clipping: the events dp_accounting's RDP accountant knows."""
  if scheme != sampling_scheme.POISSON:
    raise ConfigError(
        "tuning_privacy", PRIVATE_RANDOM_SEARCH,
        "only with Poisson sampling, add/remove-one adjacency and exact"
        f" clipping (not {scheme.sampler} sampling, {scheme.adjacency}"
        f"{scheme.bound.describe()}): dp_accounting's"
        " RepeatAndSelectDpEvent is RDP only")


def search_event(triplet: PrivacyTriplet,
                 count: TrialCount) -> accountants.SearchEvent:
  """The whole search: the best of K ~ count private trials at `triplet`."""
  return accountants.SearchEvent(accountants.RunEvent(triplet), count.mean,
                                 count.eta)


def search_epsilon(triplet: PrivacyTriplet, delta: float,
                   count: TrialCount) -> accounting.EpsilonReport:
  """The (eps, delta) of a whole private random search at `triplet`."""
  require_delta(delta)
  value = accountant_registry.named(ACCOUNTANT).epsilon(
      [search_event(triplet, count)], delta)
  return accounting.EpsilonReport(
      value, delta, ACCOUNTANT, sampling_scheme.ADD_REMOVE,
      sampling_scheme.POISSON.describe(triplet.batch_size))


def composed_runs_epsilon(triplet: PrivacyTriplet, delta: float,
                          runs: int) -> float:
  """eps of `runs` private trials all released (plain RDP composition)."""
  return accountant_registry.named("rdp").epsilon(
      [accountants.RunEvent(triplet)] * runs, delta)


def calibrate_search_sigma(target_epsilon: float, triplet: PrivacyTriplet,
                           delta: float, count: TrialCount) -> float:
  """The smallest sigma (rounded up to 1e-4) at which each trial of
  the search may run so that the whole search spends `target_epsilon`."""
  if not target_epsilon > 0:
    raise ConfigError("target epsilon", target_epsilon, "a number > 0")

  def gap(log_sigma: float) -> float:
    at = dataclasses.replace(triplet, noise_multiplier=math.exp(log_sigma))
    return search_epsilon(at, delta, count).epsilon - target_epsilon

  low, high = (math.log(s) for s in accounting.SIGMA_RANGE)
  if gap(high) > 0:
    raise ConfigError(
        "target epsilon", target_epsilon, "a budget this search can reach:"
        f" even sigma = {accounting.SIGMA_RANGE[1]:g} spends more")
  if gap(low) <= 0:
    return accounting.SIGMA_RANGE[0]
  log_sigma = optimize.brentq(gap, low, high, xtol=1e-6)
  return math.ceil(math.exp(log_sigma + 1e-5) * 1e4) / 1e4
