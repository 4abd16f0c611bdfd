"""The accountants of runs, each offered for the schemes its coverage
declares (`accountant_registry.py`), registered in this order:

| name | covers | how it composes |
|---|---|---|
| rdp | Poisson, fixed-size (Birrell et al. 2024) | RDP curves add |
| prv | Poisson add/remove-one | Opacus' PRVs (Gopi et al. 2021) |
| pld | Poisson, truncated Poisson | dp_accounting's PLDs |
| rdp-wang | fixed-size replace-one | Wang et al. 2019, for comparison |
| pld-jl | JL clipping, Poisson add/remove-one | JL's PLD mixtures |

For exact clipping they give each (sampler, adjacency) pair these, the first
its default:

| sampler | add/remove-one | replace-one |
|---|---|---|
| poisson | rdp, prv, pld | pld, rdp (Taylor bound) |
| truncated-poisson | pld | pld |
| fixed | rdp (theorems 3.1, 3.3) | rdp (theorem 3.4), rdp-wang |
| fixed-with-replacement | rdp (theorem 3.6) | - |

JL clipping has its own accountant, `pld-jl`, for Poisson add/remove-one.
RDP and PLD compose each sampler's own mechanism (`rdp_per_step`,
`pld_event`); the others are of one sampler.
"""

from typing import Any, Sequence

from dp_accounting import dp_event
from dp_accounting import pld
from dp_accounting import privacy_accountant
from dp_accounting import rdp as dp_rdp
import numpy as np

from tan_tune.privacy import accountant_registry
from tan_tune.privacy import jl_accounting
from tan_tune.privacy import limits
from tan_tune.privacy import mechanisms
from tan_tune.privacy.accountant_registry import Accountant, Coverage
from tan_tune.privacy.clipping_bound import JlBound
from tan_tune.privacy.samplers import ADD_REMOVE, REPLACE_ONE
from tan_tune.privacy.samplers import Fixed, FixedWithReplacement
from tan_tune.privacy.samplers import Poisson, TruncatedPoisson

# dp_accounting's PLDAccountant grid, and the tail mass its PLDs drop.
_PLD_INTERVAL, _PLD_TAIL = 1e-4, 1e-15
# Opacus' PRV accountant: its eps error, its delta error as a share of delta.
_PRV_EPS_ERROR, _PRV_DELTA_SHARE = 0.01, 1e-3
_RELATIONS = {
    ADD_REMOVE: privacy_accountant.NeighboringRelation.ADD_OR_REMOVE_ONE,
    REPLACE_ONE: privacy_accountant.NeighboringRelation.REPLACE_ONE,
}


@accountant_registry.register
class Rdp(Accountant):
  """Renyi DP: each event's curve over the orders, summed, converted once."""

  name = "rdp"
  coverage = Coverage(frozenset({
      (Poisson, ADD_REMOVE), (Poisson, REPLACE_ONE), (Fixed, ADD_REMOVE),
      (Fixed, REPLACE_ONE), (FixedWithReplacement, ADD_REMOVE)}))

  def curve(self, event: Any) -> np.ndarray:
    t = event.triplet
    return t.steps * event.scheme.sampler.rdp_per_step(
        event.scheme.adjacency, t.dataset_size, t.batch_size, event.sigma)

  def _epsilon(self, events: Sequence[Any], delta: float) -> float:
    return mechanisms.rdp_to_epsilon(
        sum(self.curve(event) for event in events), delta)


# The numerical accountants refuse a grid of more than limits.MAX_GRID_POINTS
# points; Poisson RDP bounds the privacy loss they must span, cheaply.


@accountant_registry.register
class Prv(Accountant):
  """Opacus' privacy random variables. Its grid spans +-L, L from RDP at
  delta_err / 4, at a mesh of eps_err / sqrt(S log(12 / delta_err) / 2)."""

  name = "prv"
  coverage = Coverage(frozenset({(Poisson, ADD_REMOVE)}))

  def _check_reach(self, event: Any, delta: float) -> None:
    t = event.triplet
    delta_error = _PRV_DELTA_SHARE * delta
    mesh = _PRV_EPS_ERROR / np.sqrt(t.steps * np.log(12 / delta_error) / 2)
    span = 2 * (_poisson_epsilon(event, delta_error / 4) + 3)
    _require_grid(self.name, event, span / mesh, mesh, span)

  def _epsilon(self, events: Sequence[Any], delta: float) -> float:
    # Opacus (and torch) only when PRV computes: listing it costs nothing.
    from opacus.accountants import PRVAccountant  # pylint: disable=g-import-not-at-top
    prv = PRVAccountant()
    prv.history = [(e.sigma, e.triplet.sampling_rate, e.triplet.steps)
                   for e in events]
    return float(prv.get_epsilon(delta=delta))


@accountant_registry.register
class Pld(Accountant):
  """dp_accounting's privacy loss distributions of each sampler's
  `pld_event`: Poisson and truncated Poisson, either adjacency. The grid
  spans the loss above its 1e-15 tail."""

  name = "pld"
  coverage = Coverage(
      frozenset({(Poisson, ADD_REMOVE), (Poisson, REPLACE_ONE),
                 (TruncatedPoisson, ADD_REMOVE),
                 (TruncatedPoisson, REPLACE_ONE)}),
      # Poisson replace-one has only RDP's Taylor bound (`fixed_size.py`).
      default_for=frozenset({(Poisson, REPLACE_ONE)}))
  interval = _PLD_INTERVAL

  def _check_reach(self, event: Any, delta: float) -> None:
    span = _poisson_epsilon(event, _PLD_TAIL)
    _require_grid(self.name, event, span / self.interval, self.interval, span)

  def _epsilon(self, events: Sequence[Any], delta: float) -> float:
    accountant = pld.PLDAccountant(_RELATIONS[events[0].scheme.adjacency])
    for event in events:
      t = event.triplet
      accountant.compose(event.scheme.sampler.pld_event(
          t.dataset_size, t.batch_size, event.sigma,
          event.scheme.cap(t.batch_size)), t.steps)
    return float(accountant.get_epsilon(delta))


@accountant_registry.register
class WangRdp(Accountant):
  """Wang, Balle and Kasiviswanathan 2019 through dp_accounting: fixed-size
  replace-one. Its Gaussian has sensitivity 1; replacing one example moves
  DP-SGD's sum by 2C, hence sigma / 2."""

  name = "rdp-wang"
  coverage = Coverage(frozenset({(Fixed, REPLACE_ONE)}))

  def _epsilon(self, events: Sequence[Any], delta: float) -> float:
    accountant = dp_rdp.RdpAccountant(
        list(mechanisms.RDP_ORDERS),
        privacy_accountant.NeighboringRelation.REPLACE_ONE)
    for event in events:
      t = event.triplet
      accountant.compose(dp_event.SampledWithoutReplacementDpEvent(
          t.dataset_size, t.batch_size,
          dp_event.GaussianDpEvent(event.sigma / 2)), t.steps)
    return float(accountant.get_epsilon(delta))


@accountant_registry.register
class JlPld(Pld):
  """JL clipping's mixtures of PLDs (`jl_accounting.py`), composed with plain
  Poisson runs; its components check their own grids too."""

  name = "pld-jl"
  coverage = Coverage(frozenset({(Poisson, ADD_REMOVE)}), JlBound)
  interval = jl_accounting.DISCRETISATION

  def _epsilon(self, events: Sequence[Any], delta: float) -> float:
    return jl_accounting.composed_epsilon(tuple(
        (e.triplet.sampling_rate, e.sigma, e.triplet.steps,
         e.scheme.bound.projections) for e in events), delta)


def _poisson_epsilon(event: Any, delta: float) -> float:
  t = event.triplet
  return mechanisms.rdp_to_epsilon(
      t.steps * mechanisms.poisson_rdp(t.sampling_rate, event.sigma), delta)


def _require_grid(name: str, event: Any, points: float, interval: float,
                  span: float) -> None:
  limits.require_grid(
      name, points, interval,
      f"the privacy loss spans {span:.3g} at sigma = {event.sigma:g} over"
      f" {event.triplet.steps:,} steps, far past any meaningful guarantee")
