"""Renyi DP curves of one DP-SGD step, one function per mechanism, and their
conversion to (eps, delta): the arithmetic under the `rdp` accountants (each
sampler picks its curves, `samplers.py`).

A curve gives RDP at each of RDP_ORDERS; curves compose by addition over
steps, runs and searches, and `rdp_to_epsilon` converts a total once, with
Balle et al. 2020 (theorem 21) as the TAN paper does.

One implementation per mechanism: the RDP of the Poisson subsampled
Gaussian (Mironov et al. 2019, add/remove-one), exact at every order
(`sampled_gaussian.py`), for runs and, through Papernot & Steinke's
repeat-and-select (`repeat_and_select.py`), for private searches;
`fixed_size` (Birrell et al. 2024) for fixed-size batches and Poisson
replace-one.
"""

import functools

from dp_accounting.rdp import rdp_privacy_accountant
import numpy as np

from tan_tune.privacy import fixed_size
from tan_tune.privacy import limits
from tan_tune.privacy import sampled_gaussian

# Orders of the Renyi divergence: dp_accounting's and Opacus' defaults
# together (more orders can only tighten the bound), up to 1024 for large
# sigma.
RDP_ORDERS = tuple(sorted(set(
    [1 + x / 10.0 for x in range(1, 100)] + list(range(11, 64))
    + [80, 128, 256, 512, 1024])))
# FSwR's bound costs O(B) per order; past this its answer is seconds away.
FSWR_MAX_BATCH = 100_000
# Opacus' defaults: the Taylor bounds' remainders need moments up to the
# order, whose exact sums grow costly past these.
_TAYLOR_ORDERS = tuple(a for a in RDP_ORDERS if a < 64)


@functools.lru_cache(maxsize=4096)
def poisson_replace_one_rdp(q: float, sigma: float) -> np.ndarray:
  """One step of the Poisson subsampled Gaussian at rate q, replace-one: the
  Taylor bound (Birrell et al. 2024)."""
  return _padded(fixed_size.poisson_replace_one_rdp(q, sigma, _TAYLOR_ORDERS))


@functools.lru_cache(maxsize=4096)
def fswor_add_remove_rdp(q: float, sigma: float) -> np.ndarray:
  """One step of B of N without replacement, add/remove-one (theorem 3.1
  and 3.3), q = B / N."""
  return fixed_size.fswor_add_remove_rdp(q, sigma, RDP_ORDERS)


@functools.lru_cache(maxsize=4096)
def fswor_replace_one_rdp(q: float, sigma: float) -> np.ndarray:
  """One step of B of N without replacement, replace-one (theorem 3.4)."""
  return _padded(fixed_size.fswor_replace_one_rdp(q, sigma, _TAYLOR_ORDERS))


@functools.lru_cache(maxsize=4096)
def fswr_add_remove_rdp(
    dataset_size: int, batch_size: int, sigma: float
) -> np.ndarray:
  """One step of B draws with replacement, add/remove-one (theorem 3.6).

  Raises:
    limits.AccountantLimit: B > FSWR_MAX_BATCH.
  """
  if batch_size > FSWR_MAX_BATCH:
    raise limits.AccountantLimit(
        "rdp", f"fixed-size batches with replacement of B = {batch_size:,}"
        f" (at most {FSWR_MAX_BATCH:,}): theorem 3.6 sums over every count"
        " of draws up to B, and no RDP bound is useful there (none can"
        " certify below 9e9 at B = 4096)")
  return _padded(fixed_size.fswr_add_remove_rdp(dataset_size, batch_size,
                                                sigma, _TAYLOR_ORDERS))


@functools.lru_cache(maxsize=256)
def fswr_rdp_lower_bound(
    dataset_size: int, batch_size: int, sigma: float
) -> np.ndarray:
  """A lower bound on any RDP curve of FSwR add/remove (one step)."""
  return _padded(fixed_size.fswr_add_remove_rdp_lower(
      dataset_size, batch_size, sigma, _TAYLOR_ORDERS))


def rdp_to_epsilon(total: np.ndarray, delta: float) -> float:
  """Balle et al. 2020's conversion of a composed RDP curve.

  At extreme sigma the best order is at an end of RDP_ORDERS: far past the
  wall (simulated runs, eps astronomical and said to be meaningless) or far
  above it (eps tiny); the bound stays a valid upper bound.
  """
  value, _ = rdp_privacy_accountant.compute_epsilon(
      np.asarray(RDP_ORDERS), total, delta)
  return float(value)


@functools.lru_cache(maxsize=4096)
def poisson_rdp(q: float, sigma: float) -> np.ndarray:
  """One step of the Poisson subsampled Gaussian at rate q, add/remove-one."""
  return sampled_gaussian.rdp(q, sigma, RDP_ORDERS)


def _padded(curve: np.ndarray) -> np.ndarray:
  """A curve on _TAYLOR_ORDERS, extended to RDP_ORDERS with +inf (no bound)."""
  return np.concatenate([curve, np.full(len(RDP_ORDERS) - len(curve), np.inf)])
