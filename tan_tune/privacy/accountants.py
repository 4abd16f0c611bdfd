"""The accountant engine: every private run described once, as an event, and
composed by one registered accountant.

Events:

* `RunEvent`: DP-SGD at a triplet (N, B, sigma, S) under a sampling scheme
  (q = B / N): a single run, a promotion, a ledger entry;
* `SearchEvent`: a private random search, the best of K ~ D runs of one
  `RunEvent`, each scored with Gaussian noise (Papernot & Steinke 2022).

Accountants are classes registered by name (`accountant_registry.py`), each
declaring the schemes it covers: the accountants of runs
(`run_accountants.py`: rdp, prv, pld, rdp-wang, pld-jl), and here
rdp-repeat-and-select, which adds RDP curves of Poisson add/remove-one runs
and searches, and pld-selection-profile, which bounds one search alone from
its trial's PLD (`selection_profile.py`); no scheme names either. Several
events compose under the first of COMPOSITION_ORDER that covers them all;
RDP accountants add curves and convert once (`mechanisms.py`). A search
alone is priced by both selection bounds, and the smaller eps is reported
under its bound's name (`tightest_selection`): both hold.
"""

import dataclasses
from typing import Sequence

import numpy as np

from tan_tune.errors import ConfigError
from tan_tune.privacy import accountant_registry
from tan_tune.privacy import mechanisms
from tan_tune.privacy import repeat_and_select
from tan_tune.privacy import selection_profile
from tan_tune.privacy.accountant_registry import Accountant, Coverage
from tan_tune.privacy.run_accountants import Rdp
from tan_tune.privacy.sampling_scheme import POISSON, SamplingScheme
from tan_tune.privacy.trial_count import TrialCount
from tan_tune.privacy.triplet import PrivacyTriplet


@dataclasses.dataclass(frozen=True)
class RunEvent:
  """DP-SGD run at `triplet`: S steps at q = B / N under `scheme`."""

  triplet: PrivacyTriplet
  scheme: SamplingScheme = POISSON

  @property
  def sigma(self) -> float:
    return float(self.triplet.noise_multiplier)

  def covered_by(self, coverage: Coverage) -> bool:
    return coverage.covers(self.scheme)


@dataclasses.dataclass(frozen=True)
class SearchEvent:
  """A private random search: K ~ `count` trials, each `run` and then, with
  `score_noise`, scored by a count of sensitivity 1 plus Gaussian noise of
  that standard deviation; the best trial alone released."""

  run: RunEvent
  count: TrialCount
  score_noise: float | None = None

  def covered_by(self, coverage: Coverage) -> bool:
    """A coverage is of runs: a search is covered only by an accountant
    that says so (rdp-repeat-and-select)."""
    del coverage
    return False


Event = RunEvent | SearchEvent
# Several events compose under the first of these that covers them all.
COMPOSITION_ORDER = ("rdp", "rdp-repeat-and-select", "pld-jl", "pld")


def for_composition(events: Sequence[Event]) -> Accountant:
  """The accountant that composes `events`: a single run's default, else the
  first of COMPOSITION_ORDER that covers every event.

  Raises:
    ConfigError: the runs' adjacencies differ, or no accountant covers them
      all (JL clipping or truncated Poisson beside fixed-size batches).
  """
  runs = [e.run if isinstance(e, SearchEvent) else e for e in events]
  adjacencies = {run.scheme.adjacency for run in runs}
  if len(adjacencies) > 1:
    raise ConfigError("adjacency", sorted(adjacencies),
                      "runs on one dataset compose under one adjacency")
  if len(events) == 1 and isinstance(events[0], RunEvent):
    return accountant_registry.named(events[0].scheme.default_accountant)
  for accountant in map(accountant_registry.named, COMPOSITION_ORDER):
    if all(accountant.covers(event) for event in events):
      return accountant
  samplers = "+".join(sorted({run.scheme.sampler for run in runs}))
  kind = ("runs with JL clipping" if any(not run.scheme.bound.exact
                                         for run in runs)
          else "truncated-poisson runs")
  raise ConfigError("sampling", samplers,
                    f"{kind} compose only with Poisson ones")


@accountant_registry.register
class RepeatAndSelectRdp(Rdp):
  """RDP of private random searches (Papernot & Steinke, theorems 2 and 6)
  beside plain runs; Poisson add/remove-one with exact clipping only."""

  name = "rdp-repeat-and-select"
  coverage = Coverage()  # Offered for no scheme: searches only compose.

  def covers(self, event: Event) -> bool:
    run = event.run if isinstance(event, SearchEvent) else event
    return run.scheme == POISSON

  def curve(self, event: Event) -> np.ndarray:
    if isinstance(event, RunEvent):
      return super().curve(event)
    # One trial: its run, then its score (the Gaussian's RDP alpha / 2s^2).
    orders = np.asarray(mechanisms.RDP_ORDERS)
    trial = super().curve(event.run)
    if event.score_noise is not None:
      trial = trial + orders / (2 * event.score_noise**2)
    return repeat_and_select.selection_rdp(orders, trial, event.count)


@accountant_registry.register
class SelectionProfile(Accountant):
  """One private random search alone, from its trial's PLD (Koskela,
  Redberg & Wang's route, `selection_profile.py`); Poisson add/remove-one
  with exact clipping only."""

  name = "pld-selection-profile"

  def covers(self, event: Event) -> bool:
    return isinstance(event, SearchEvent) and event.run.scheme == POISSON

  def _epsilon(self, events: Sequence[Event], delta: float) -> float:
    if len(events) != 1:
      raise ValueError(f"{self.name} bounds one search alone, not"
                       f" {len(events)} events composed")
    (search,) = events
    t = search.run.triplet
    trial = selection_profile.trial_pld(t.sampling_rate, search.run.sigma,
                                        t.steps, search.score_noise)
    return selection_profile.epsilon(trial, search.count, delta)


# A search alone: each bound holds, so the smaller does.
SELECTION_BOUNDS = ("rdp-repeat-and-select", "pld-selection-profile")


def tightest_selection(search: SearchEvent,
                       delta: float) -> tuple[float, Accountant]:
  """The smaller eps of SELECTION_BOUNDS for `search` alone, and whose it
  is (RDP's on a tie)."""
  bounds = [(accountant_registry.named(name).epsilon([search], delta), i)
            for i, name in enumerate(SELECTION_BOUNDS)]
  value, best = min(bounds)
  return value, accountant_registry.named(SELECTION_BOUNDS[best])
