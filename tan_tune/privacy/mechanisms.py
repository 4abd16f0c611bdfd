"""The accountants' arithmetic for one (N, B, sigma) step, by sampling scheme.

RDP accountants give a per-step Renyi DP curve over the orders alpha, which
composes by addition over steps and runs; `rdp_to_epsilon` converts a total
with Balle et al. 2020 (theorem 21), as the TAN paper does. PRV and PLD
accountants compose S steps themselves and return epsilon.

Sources: Opacus' RDP of the sampled Gaussian (Mironov et al. 2019) and PRV
(Gopi et al. 2021) for Poisson add/remove; `fixed_size` (Birrell et al.
2024) for fixed-size batches and for Poisson replace-one; dp_accounting for
PLDs (Poisson either adjacency, truncated Poisson) and Wang et al. 2019;
`jl_accounting` for JL clipping (PLDs only: its RDP is infinite).
"""

import functools
import warnings

from dp_accounting import dp_event
from dp_accounting import pld
from dp_accounting import privacy_accountant
from dp_accounting import rdp as dp_rdp
import numpy as np
from opacus.accountants import PRVAccountant
from opacus.accountants.analysis import rdp

from tan_tune.privacy import fixed_size
from tan_tune.privacy import jl_accounting
from tan_tune.privacy import limits
from tan_tune.privacy.sampling_scheme import ADD_REMOVE, SamplingScheme
from tan_tune.privacy.triplet import PrivacyTriplet

# Orders of the Renyi divergence: Opacus' defaults, extended for large sigma.
RDP_ORDERS = tuple(
    [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)) + [80, 128, 256]
)
# FSwR's bound costs O(B) per order; past this its answer is seconds away.
FSWR_MAX_BATCH = 100_000
# dp_accounting's PLDAccountant grid, and the tail mass its PLDs drop.
_PLD_INTERVAL, _PLD_TAIL = 1e-4, 1e-15
# Opacus' PRV accountant: its eps error, its delta error as a share of delta.
_PRV_EPS_ERROR, _PRV_DELTA_SHARE = 0.01, 1e-3
# Opacus' defaults: the Taylor bounds' remainders need moments up to the
# order, whose exact sums grow costly past these.
_TAYLOR_ORDERS = tuple(a for a in RDP_ORDERS if a < 64)


@functools.lru_cache(maxsize=4096)
def rdp_per_step(
    scheme: SamplingScheme, dataset_size: int, batch_size: int, sigma: float
) -> np.ndarray:
  """One step's RDP at each of RDP_ORDERS (inf where not bounded)."""
  q = batch_size / dataset_size
  key = (scheme.sampler, scheme.adjacency)
  if key == ("poisson", ADD_REMOVE):
    return np.asarray(rdp.compute_rdp(q=q, noise_multiplier=sigma, steps=1,
                                      orders=list(RDP_ORDERS)))
  if key == ("fixed", ADD_REMOVE):
    return fixed_size.fswor_add_remove_rdp(q, sigma, RDP_ORDERS)
  if key == ("fixed-with-replacement", ADD_REMOVE):
    if batch_size > FSWR_MAX_BATCH:
      raise limits.AccountantLimit(
          "rdp", f"fixed-size batches with replacement of B = {batch_size:,}"
          f" (at most {FSWR_MAX_BATCH:,}): theorem 3.6 sums over every count"
          " of draws up to B, and no RDP bound is useful there (none can"
          " certify below 9e9 at B = 4096)")
    curve = fixed_size.fswr_add_remove_rdp(dataset_size, batch_size, sigma,
                                           _TAYLOR_ORDERS)
  elif scheme.sampler == "fixed":
    curve = fixed_size.fswor_replace_one_rdp(q, sigma, _TAYLOR_ORDERS)
  elif scheme.sampler == "poisson":
    curve = fixed_size.poisson_replace_one_rdp(q, sigma, _TAYLOR_ORDERS)
  else:
    raise ValueError(f"no RDP curve for {key}")
  return _padded(curve)


@functools.lru_cache(maxsize=256)
def fswr_rdp_lower_bound(
    dataset_size: int, batch_size: int, sigma: float
) -> np.ndarray:
  """A lower bound on any RDP curve of FSwR add/remove (one step)."""
  return _padded(fixed_size.fswr_add_remove_rdp_lower(
      dataset_size, batch_size, sigma, _TAYLOR_ORDERS))


def rdp_to_epsilon(total: np.ndarray, delta: float) -> float:
  """Balle et al. 2020's conversion of a composed RDP curve."""
  with warnings.catch_warnings():
    # At extreme sigma the best order is at an end of RDP_ORDERS: far past
    # the wall (simulated runs, eps astronomical and said to be meaningless)
    # or far above it (eps tiny). The bound stays a valid upper bound.
    warnings.filterwarnings("ignore", message="Optimal order is the")
    value, _ = rdp.get_privacy_spent(orders=list(RDP_ORDERS), rdp=total,
                                     delta=delta)
  return float(value)


def check_reach(accountant: str, q: float, sigma: float, steps: int,
                delta: float) -> None:
  """Raises limits.AccountantLimit before a numerical accountant would need a
  grid of more than limits.MAX_GRID_POINTS points.

  Each grid must reach the privacy loss that only a tiny tail exceeds, which
  Poisson RDP bounds cheaply: eps_RDP(delta') for the tail delta' the
  accountant drops. PRV (Gopi et al., Opacus) spans +-L with L from RDP at
  delta_err / 4 and a mesh of eps_err / sqrt(S log(12 / delta_err) / 2);
  dp_accounting's PLDs span the loss above their 1e-15 tail at an interval of
  1e-4 (5e-3 for JL, which also checks its components itself).
  """
  if accountant not in ("prv", "pld", "pld-jl"):
    return  # RDP's closed forms cost the same for any setting.
  poisson = rdp.compute_rdp(q=q, noise_multiplier=sigma, steps=steps,
                            orders=list(RDP_ORDERS))
  if accountant == "prv":
    delta_error = _PRV_DELTA_SHARE * delta
    mesh = _PRV_EPS_ERROR / np.sqrt(steps * np.log(12 / delta_error) / 2)
    span = 2 * (rdp_to_epsilon(poisson, delta_error / 4) + 3)
    points, interval = span / mesh, mesh
  else:
    interval = (jl_accounting.DISCRETISATION if accountant == "pld-jl"
                else _PLD_INTERVAL)
    span = rdp_to_epsilon(poisson, _PLD_TAIL)
    points = span / interval
  limits.require_grid(
      accountant, points, interval,
      f"the privacy loss spans {span:.3g} at sigma = {sigma:g} over"
      f" {steps:,} steps, far past any meaningful guarantee")


def composed_epsilon(
    scheme: SamplingScheme, accountant: str, dataset_size: int,
    batch_size: int, sigma: float, steps: int, delta: float,
) -> float:
  """epsilon after `steps` steps, for an accountant in scheme.accountants.

  Raises:
    limits.AccountantLimit: a numerical accountant would need too large a
      grid.
  """
  q = batch_size / dataset_size
  if accountant in ("prv", "pld-jl"):  # PLDs are checked where composed.
    check_reach(accountant, q, sigma, steps, delta)
  if accountant == "pld-jl":
    return jl_accounting.jl_epsilon(q, sigma, steps, delta,
                                    scheme.jl_projections)
  if accountant == "rdp":
    curve = rdp_per_step(scheme, dataset_size, batch_size, sigma)
    return rdp_to_epsilon(curve * steps, delta)
  if accountant == "prv":
    prv = PRVAccountant()
    prv.history = [(sigma, q, steps)]
    return float(prv.get_epsilon(delta=delta))
  if accountant == "rdp-wang":
    # Its Gaussian has sensitivity 1; replacing one example moves DP-SGD's
    # sum by 2C, hence sigma / 2.
    accountant = dp_rdp.RdpAccountant(
        list(RDP_ORDERS), privacy_accountant.NeighboringRelation.REPLACE_ONE)
    accountant.compose(dp_event.SampledWithoutReplacementDpEvent(
        dataset_size, batch_size, dp_event.GaussianDpEvent(sigma / 2)), steps)
    return float(accountant.get_epsilon(delta))
  return composed_pld_epsilon(
      [(PrivacyTriplet(dataset_size, batch_size, sigma, steps), scheme)], delta)


def composed_pld_epsilon(
    runs: list[tuple[PrivacyTriplet, SamplingScheme]], delta: float
) -> float:
  """epsilon of Poisson and truncated-Poisson runs composed as PLDs (one
  adjacency for all); with JL clipping among them, Poisson add/remove only."""
  jl = any(scheme.jl_projections is not None for _, scheme in runs)
  for triplet, _ in runs:
    check_reach("pld-jl" if jl else "pld", triplet.sampling_rate,
                float(triplet.noise_multiplier), triplet.steps, delta)
  if jl:
    return jl_accounting.composed_epsilon(tuple(
        (t.sampling_rate, float(t.noise_multiplier), t.steps,
         scheme.jl_projections) for t, scheme in runs), delta)
  relation = (privacy_accountant.NeighboringRelation.ADD_OR_REMOVE_ONE
              if runs[0][1].adjacency == ADD_REMOVE
              else privacy_accountant.NeighboringRelation.REPLACE_ONE)
  accountant = pld.PLDAccountant(relation)
  for triplet, scheme in runs:
    sigma = float(triplet.noise_multiplier)
    if scheme.sampler == "truncated-poisson":
      event = dp_event.TruncatedSubsampledGaussianDpEvent(
          triplet.dataset_size, triplet.sampling_rate,
          scheme.cap(triplet.batch_size), sigma)
    else:
      event = dp_event.PoissonSampledDpEvent(
          triplet.sampling_rate, dp_event.GaussianDpEvent(sigma))
    accountant.compose(event, triplet.steps)
  return float(accountant.get_epsilon(delta))


def _padded(curve: np.ndarray) -> np.ndarray:
  """A curve on _TAYLOR_ORDERS, extended to RDP_ORDERS with +inf (no bound)."""
  return np.concatenate([curve, np.full(len(RDP_ORDERS) - len(curve), np.inf)])
