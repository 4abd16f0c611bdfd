"""One triplet under every sampler: what each costs, what each needs.

For a triplet (N, B, sigma, S) and a list of samplers, each sampler's row
holds its epsilon under every adjacency and accountant that covers it, the
sigma it needs for a target epsilon, and a measurement of how TAN's eta law
carries over to it: epsilon again at half the batch and half the noise (the
same eta = q sqrt(S) / (sqrt(2) sigma), hence what a simulated trial assumes
about the reference run). Under Poisson sampling the two agree while
sigma > 2 (TAN section 3.2). A fixed-size batch under add/remove spends like
Poisson at sigma / 2 (Birrell et al., theorem 3.1), so its law holds at
twice the eta and only while sigma > 4.
"""

import dataclasses
import math

from tan_tune.errors import ConfigError
from tan_tune.privacy import accounting
from tan_tune.privacy import sampling_scheme
from tan_tune.privacy.samplers import DpSampler
from tan_tune.privacy.sampling_scheme import SamplingScheme
from tan_tune.privacy.triplet import PrivacyTriplet


@dataclasses.dataclass(frozen=True)
class SamplerRow:
  """One sampler's figures for one triplet.

  Attributes:
    sampler: the row's.
    max_batch_size: the largest batch a step sees; None for Poisson.
    epsilons: eps by (adjacency, accountant).
    rdp_floor: the least eps any RDP accountant can give, for a sampler
      with a lower bound on its RDP (FSwR); None for others.
    sigma_for_target: the sigma its default accountant (add/remove) needs for
      the target; None without a target or when no sigma reaches it.
    eta_law_ratio: eps at (B/2, sigma/2), same S and eta, over eps at
      (B, sigma), default accountant; 1 when the eta law holds exactly.
  """

  sampler: DpSampler
  max_batch_size: int | None
  epsilons: dict[tuple[str, str], float]
  rdp_floor: float | None
  sigma_for_target: float | None
  eta_law_ratio: float | None

  def as_dict(self) -> dict:
    return {
        "sampler": str(self.sampler),
        "max_batch_size": self.max_batch_size,
        "epsilon": [{"adjacency": a, "accountant": c, "epsilon": e}
                    for (a, c), e in self.epsilons.items()],
        "rdp_floor": self.rdp_floor,
        "sigma_for_target": self.sigma_for_target,
        "eta_law_ratio": self.eta_law_ratio,
    }


def compare_samplers(
    triplet: PrivacyTriplet, delta: float, samplers: tuple[DpSampler, ...],
    target_epsilon: float | None = None,
) -> list[SamplerRow]:
  """A `SamplerRow` per sampler, in the order given."""
  return [_row(triplet, delta, sampler, target_epsilon)
          for sampler in samplers]


def _row(triplet: PrivacyTriplet, delta: float, sampler: DpSampler,
         target_epsilon: float | None) -> SamplerRow:
  default = SamplingScheme(sampler)
  epsilons = {}
  for adjacency in sampling_scheme.ADJACENCIES:
    try:
      scheme = SamplingScheme(sampler, adjacency)
    except ConfigError:  # No accountant covers this pair.
      continue
    for accountant in scheme.accountants:
      epsilons[(adjacency, accountant)] = accounting.epsilon(
          triplet, delta, accountant, scheme).epsilon
  sigma = None
  if target_epsilon is not None:
    try:
      sigma = accounting.calibrate_sigma(
          triplet.dataset_size, triplet.batch_size, triplet.steps,
          target_epsilon, delta, scheme=default)
    except ConfigError:
      sigma = None
  ratio = None
  if triplet.batch_size >= 2:
    half = PrivacyTriplet(triplet.dataset_size, triplet.batch_size // 2,
                          triplet.noise_multiplier * (triplet.batch_size // 2)
                          / triplet.batch_size, triplet.steps)
    here = epsilons[(default.adjacency, default.default_accountant)]
    there = accounting.epsilon(half, delta, scheme=default).epsilon
    ratio = there / here if here and math.isfinite(here) else None
  floor = accounting.rdp_floor(triplet, delta, default)
  return SamplerRow(sampler, default.cap(triplet.batch_size), epsilons,
                    None if floor is None else floor.epsilon, sigma, ratio)
