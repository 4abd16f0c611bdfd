"""The accountant engine: every private run described once, as an event, and
composed by one accountant from a registry.

Events:

* `RunEvent`: DP-SGD at a triplet (N, B, sigma, S) under a sampling scheme
  (q = B / N): a single run, a promotion, a ledger entry;
* `SearchEvent`: a private random search, the best of K ~ D(eta, mean) runs
  of one `RunEvent` (Papernot & Steinke 2022).

Accountants, each a class registered by name with `register`:

| name | covers | how it composes |
|---|---|---|
| rdp | Poisson, fixed-size (Birrell et al. 2024) | RDP curves add |
| rdp-repeat-and-select | Poisson add/remove-one runs and searches | RDP curves add |
| prv | Poisson add/remove-one | Opacus' PRVs (Gopi et al. 2021) |
| pld | Poisson, truncated Poisson | dp_accounting's PLDs |
| pld-jl | JL clipping, Poisson add/remove-one | JL's PLD mixtures |
| rdp-wang | fixed-size replace-one | Wang et al. 2019, for comparison |

Each accountant declares what it covers once, in `sampling_scheme.COVERAGE`
(a scheme lists its accountants from it, default first), but
rdp-repeat-and-select, whose searches no scheme names, in its `covers`;
`named` is the one place an accountant is found by its name.
Several events compose under the first of COMPOSITION_ORDER that covers them
all; RDP accountants add curves and convert once (`mechanisms.py`).
"""

import abc
import dataclasses
from typing import ClassVar, Sequence

from dp_accounting import dp_event
from dp_accounting import pld
from dp_accounting import privacy_accountant
from dp_accounting import rdp as dp_rdp
import numpy as np
from opacus.accountants import PRVAccountant

from tan_tune.errors import ConfigError
from tan_tune.privacy import jl_accounting
from tan_tune.privacy import limits
from tan_tune.privacy import mechanisms
from tan_tune.privacy.sampling_scheme import ADD_REMOVE, COVERAGE, POISSON
from tan_tune.privacy.sampling_scheme import Sampler, SamplingScheme
from tan_tune.privacy.triplet import PrivacyTriplet

# dp_accounting's PLDAccountant grid, and the tail mass its PLDs drop.
_PLD_INTERVAL, _PLD_TAIL = 1e-4, 1e-15
# Opacus' PRV accountant: its eps error, its delta error as a share of delta.
_PRV_EPS_ERROR, _PRV_DELTA_SHARE = 0.01, 1e-3


@dataclasses.dataclass(frozen=True)
class RunEvent:
  """DP-SGD run at `triplet`: S steps at q = B / N under `scheme`."""

  triplet: PrivacyTriplet
  scheme: SamplingScheme = POISSON

  @property
  def sigma(self) -> float:
    return float(self.triplet.noise_multiplier)


@dataclasses.dataclass(frozen=True)
class SearchEvent:
  """A private random search: K ~ D(eta, mean) runs of `run`, the best one
  released (eta = 0 logarithmic, 1 geometric, inf Poisson)."""

  run: RunEvent
  mean: float
  eta: float


Event = RunEvent | SearchEvent


class Accountant(abc.ABC):
  """Composes events into one epsilon at a delta."""

  name: ClassVar[str]

  def covers(self, event: Event) -> bool:
    return (isinstance(event, RunEvent)
            and COVERAGE[self.name].covers(event.scheme))

  def epsilon(self, events: Sequence[Event], delta: float) -> float:
    """eps of `events` composed.

    Raises:
      limits.AccountantLimit: a numerical accountant would need too large a
        grid.
    """
    for event in events:
      if not self.covers(event):
        raise ValueError(f"{self.name} does not cover {event}")
      self._check_reach(event, delta)
    return self._epsilon(events, delta)

  def _check_reach(self, event: Event, delta: float) -> None:
    """Raises limits.AccountantLimit where this accountant cannot compute
    `event`; RDP's closed forms cost the same for any setting."""

  @abc.abstractmethod
  def _epsilon(self, events: Sequence[Event], delta: float) -> float:
    ...


_REGISTRY: dict[str, Accountant] = {}
# Several events compose under the first of these that covers them all.
COMPOSITION_ORDER = ("rdp", "rdp-repeat-and-select", "pld-jl", "pld")


def register(cls: type[Accountant]) -> type[Accountant]:
  """Class decorator: makes an accountant available by its name."""
  _REGISTRY[cls.name] = cls()
  return cls


def named(name: str) -> Accountant:
  """The registered accountant called `name`."""
  if name not in _REGISTRY:
    raise ConfigError("accountant", name,
                      f"expected one of {', '.join(_REGISTRY)}")
  return _REGISTRY[name]


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
    return named(events[0].scheme.default_accountant)
  for name in COMPOSITION_ORDER:
    if all(named(name).covers(event) for event in events):
      return named(name)
  samplers = "+".join(sorted({run.scheme.sampler for run in runs}))
  kind = ("runs with JL clipping" if any(not run.scheme.bound.exact
                                         for run in runs)
          else "truncated-poisson runs")
  raise ConfigError("sampling", samplers,
                    f"{kind} compose only with Poisson ones")


@register
class Rdp(Accountant):
  """Renyi DP: each event's curve over the orders, summed, converted once."""

  name = "rdp"

  def curve(self, event: Event) -> np.ndarray:
    t = event.triplet
    return t.steps * mechanisms.rdp_per_step(
        event.scheme, t.dataset_size, t.batch_size, event.sigma)

  def _epsilon(self, events: Sequence[Event], delta: float) -> float:
    return mechanisms.rdp_to_epsilon(
        sum(self.curve(event) for event in events), delta)


@register
class RepeatAndSelectRdp(Rdp):
  """RDP of private random searches (Papernot & Steinke, theorems 2 and 6)
  beside plain runs; Poisson add/remove-one with exact clipping only."""

  name = "rdp-repeat-and-select"

  def covers(self, event: Event) -> bool:
    run = event.run if isinstance(event, SearchEvent) else event
    return run.scheme == POISSON

  def curve(self, event: Event) -> np.ndarray:
    if isinstance(event, RunEvent):
      return super().curve(event)
    t = event.run.triplet
    return mechanisms.search_rdp(t.dataset_size, t.batch_size, event.run.sigma,
                                 t.steps, event.mean, event.eta)


# The numerical accountants refuse a grid of more than limits.MAX_GRID_POINTS
# points; Poisson RDP bounds the privacy loss they must span, cheaply.


@register
class Prv(Accountant):
  """Opacus' privacy random variables. Its grid spans +-L, L from RDP at
  delta_err / 4, at a mesh of eps_err / sqrt(S log(12 / delta_err) / 2)."""

  name = "prv"

  def _check_reach(self, event: RunEvent, delta: float) -> None:
    t = event.triplet
    delta_error = _PRV_DELTA_SHARE * delta
    mesh = _PRV_EPS_ERROR / np.sqrt(t.steps * np.log(12 / delta_error) / 2)
    span = 2 * (_poisson_epsilon(event, delta_error / 4) + 3)
    _require_grid(self.name, event, span / mesh, mesh, span)

  def _epsilon(self, events: Sequence[Event], delta: float) -> float:
    prv = PRVAccountant()
    prv.history = [(e.sigma, e.triplet.sampling_rate, e.triplet.steps)
                   for e in events]
    return float(prv.get_epsilon(delta=delta))


@register
class Pld(Accountant):
  """dp_accounting's privacy loss distributions: Poisson and truncated
  Poisson, either adjacency. The grid spans the loss above its 1e-15 tail."""

  name = "pld"
  interval = _PLD_INTERVAL

  def _check_reach(self, event: RunEvent, delta: float) -> None:
    span = _poisson_epsilon(event, _PLD_TAIL)
    _require_grid(self.name, event, span / self.interval, self.interval, span)

  def _epsilon(self, events: Sequence[Event], delta: float) -> float:
    relation = (privacy_accountant.NeighboringRelation.ADD_OR_REMOVE_ONE
                if events[0].scheme.adjacency == ADD_REMOVE
                else privacy_accountant.NeighboringRelation.REPLACE_ONE)
    accountant = pld.PLDAccountant(relation)
    for event in events:
      t = event.triplet
      if event.scheme.sampler is Sampler.TRUNCATED_POISSON:
        step = dp_event.TruncatedSubsampledGaussianDpEvent(
            t.dataset_size, t.sampling_rate, event.scheme.cap(t.batch_size),
            event.sigma)
      else:
        step = dp_event.PoissonSampledDpEvent(
            t.sampling_rate, dp_event.GaussianDpEvent(event.sigma))
      accountant.compose(step, t.steps)
    return float(accountant.get_epsilon(delta))


@register
class JlPld(Pld):
  """JL clipping's mixtures of PLDs (`jl_accounting.py`), composed with plain
  Poisson runs; its components check their own grids too."""

  name = "pld-jl"
  interval = jl_accounting.DISCRETISATION

  def _epsilon(self, events: Sequence[Event], delta: float) -> float:
    return jl_accounting.composed_epsilon(tuple(
        (e.triplet.sampling_rate, e.sigma, e.triplet.steps,
         e.scheme.bound.projections) for e in events), delta)


@register
class WangRdp(Accountant):
  """Wang, Balle and Kasiviswanathan 2019 through dp_accounting: fixed-size
  replace-one. Its Gaussian has sensitivity 1; replacing one example moves
  DP-SGD's sum by 2C, hence sigma / 2."""

  name = "rdp-wang"

  def _epsilon(self, events: Sequence[Event], delta: float) -> float:
    accountant = dp_rdp.RdpAccountant(
        list(mechanisms.RDP_ORDERS),
        privacy_accountant.NeighboringRelation.REPLACE_ONE)
    for event in events:
      t = event.triplet
      accountant.compose(dp_event.SampledWithoutReplacementDpEvent(
          t.dataset_size, t.batch_size,
          dp_event.GaussianDpEvent(event.sigma / 2)), t.steps)
    return float(accountant.get_epsilon(delta))


def _poisson_epsilon(event: RunEvent, delta: float) -> float:
  t = event.triplet
  return mechanisms.rdp_to_epsilon(
      t.steps * mechanisms.poisson_rdp(t.sampling_rate, event.sigma), delta)


def _require_grid(name: str, event: RunEvent, points: float, interval: float,
                  span: float) -> None:
  limits.require_grid(
      name, points, interval,
      f"the privacy loss spans {span:.3g} at sigma = {event.sigma:g} over"
      f" {event.triplet.steps:,} steps, far past any meaningful guarantee")
