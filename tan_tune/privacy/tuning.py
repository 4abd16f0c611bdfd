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
* `private_random_search`: K ~ D trials (`trial_count.py`), each a DP run at
  the reference triplet with hyper-parameters drawn independently of the
  data and of each other, each scored on a validation split held out of the
  private training data by a DP count of its correct predictions (Gaussian
  noise of standard deviation s, sensitivity 1), only the best released.

One trial is then the base mechanism Q: S Poisson-subsampled Gaussian steps
on the training part composed with the Gaussian score on the validation
part. An example lands in one part or the other, never both, by a keyed
function of its content, so adding or removing it moves no other example;
composing both mechanisms is the safe bound. Two bounds hold for the best of
K runs of Q, and the search reports the smaller, naming it
(`accountants.tightest_selection`):

* rdp-repeat-and-select: Papernot & Steinke's RDP (`repeat_and_select.py`),
  on Q's exact RDP curve: S times the subsampled Gaussian's
  (`sampled_gaussian.py`) plus the score's alpha / (2 s^2);
* pld-selection-profile: the privacy profile of the selection from Q's PLD,
  the route of Koskela, Redberg & Wang (ICML 2024) (`selection_profile.py`).

Neither holds if K, the other trials, a score, which example is in which
part, or any choice adapted to the trials' results (TPE, cross-trial early
stopping) is published: K and the split's key are kept with the search's
secrets, and the test split is touched once, by the released model.
"""

import dataclasses
import math

from scipy import optimize

from tan_tune.errors import ConfigError
from tan_tune.privacy import accountant_registry
from tan_tune.privacy import accountants
from tan_tune.privacy import accounting
from tan_tune.privacy import sampling_scheme
from tan_tune.privacy.trial_count import TrialCount
from tan_tune.privacy.triplet import PrivacyTriplet, require_delta

# The search this accounting covers, as a search file's `tuning_privacy`
# names it (its strategy, `search/modes.py`, and the errors here).
PRIVATE_RANDOM_SEARCH = "private_random_search"
# The bound calibration starts from (`calibrate_search_sigma`).
_RDP_BOUND = accountants.SELECTION_BOUNDS[0]
# Calibration looks below RDP's sigma in steps of this much log sigma.
_CALIBRATION_STEP = math.log(1.25)


def require_search_scheme(scheme: sampling_scheme.SamplingScheme) -> None:
  """Private random searches are accounted for Poisson add/remove-one with
  exact clipping: the trial both selection bounds know."""
  if scheme != sampling_scheme.POISSON:
    raise ConfigError(
        "tuning_privacy", PRIVATE_RANDOM_SEARCH,
        "only with Poisson sampling, add/remove-one adjacency and exact"
        f" clipping (not {scheme.sampler} sampling, {scheme.adjacency}"
        f"{scheme.bound.describe()}): the selection bounds know that"
        " trial only")


def search_event(triplet: PrivacyTriplet, count: TrialCount,
                 score_noise: float | None = None) -> accountants.SearchEvent:
  """The whole search: the best of K ~ count private trials at `triplet`,
  each scored with Gaussian noise `score_noise` (none: scored on public
  data)."""
  return accountants.SearchEvent(accountants.RunEvent(triplet), count,
                                 score_noise)


def search_epsilon(triplet: PrivacyTriplet, delta: float, count: TrialCount,
                   score_noise: float | None = None
                   ) -> accounting.EpsilonReport:
  """The (eps, delta) of a whole private random search at `triplet`: the
  smaller of its two bounds, which the report names."""
  require_delta(delta)
  report = accounting.composed_epsilon(
      [search_event(triplet, count, score_noise)], delta)
  return dataclasses.replace(
      report, sampling=sampling_scheme.POISSON.describe(triplet.batch_size))


def composed_runs_epsilon(triplet: PrivacyTriplet, delta: float,
                          runs: int) -> float:
  """eps of `runs` private trials all released (plain RDP composition)."""
  return accountant_registry.named("rdp").epsilon(
      [accountants.RunEvent(triplet)] * runs, delta)


def calibrate_search_sigma(target_epsilon: float, triplet: PrivacyTriplet,
                           delta: float, count: TrialCount,
                           score_noise: float | None = None) -> float:
  """The smallest sigma (rounded up to 1e-4) at which each trial of
  the search may run so that the whole search spends `target_epsilon`.

  RDP's sigma is found first (its bound is cheap at any sigma): the
  smaller of both bounds meets the target there too, so the search for
  the tightest sigma starts from it, downwards."""
  if not target_epsilon > 0:
    raise ConfigError("target epsilon", target_epsilon, "a number > 0")

  def gap(log_sigma: float, rdp_only: bool = False) -> float:
    at = dataclasses.replace(triplet, noise_multiplier=math.exp(log_sigma))
    search = search_event(at, count, score_noise)
    value = (accountant_registry.named(_RDP_BOUND).epsilon([search], delta)
             if rdp_only else accountants.tightest_selection(search, delta)[0])
    return value - target_epsilon

  low, high = (math.log(s) for s in accounting.SIGMA_RANGE)
  if gap(high) > 0:
    raise ConfigError(
        "target epsilon", target_epsilon, "a budget this search can reach:"
        f" even sigma = {accounting.SIGMA_RANGE[1]:g} spends more")
  upper = high
  if gap(high, rdp_only=True) <= 0 < gap(low, rdp_only=True):
    upper = min(high, optimize.brentq(gap, low, high, args=(True,),
                                      xtol=1e-6) + 1e-5)
  lower = upper
  while lower > low and gap(lower) <= 0:
    lower = max(low, lower - _CALIBRATION_STEP)
  if gap(lower) <= 0:
    return accounting.SIGMA_RANGE[0]
  log_sigma = optimize.brentq(gap, lower, upper, xtol=1e-6)
  return math.ceil(math.exp(log_sigma + 1e-5) * 1e4) / 1e4
