"""How batches are drawn, and which neighbouring datasets a guarantee is for.

An epsilon means nothing without both: the same (N, B, sigma, S) spends
2-3x more with fixed-size batches than with Poisson sampling under
add/remove adjacency (Birrell et al. 2024). A scheme names a registered
sampler (`samplers.py`; built-in: `poisson`, `truncated-poisson`, `fixed`,
`fixed-with-replacement`) and an adjacency, `add/remove-one` (one dataset
has one more example) or `replace-one` (one example differs).

Each registered accountant declares what it covers, once, as its coverage
(`accountant_registry.py`): a scheme's accountants and its validation
derive from the registered accountants (`run_accountants.py` has the table
of the built-ins).

The sensitivity is not the sampler's: it is the clipping engine's
`ClippingBound` (`clipping_bound.py`), which the scheme carries so that an
accountant sees the whole step.
"""

import dataclasses
import math

from tan_tune.errors import ConfigError
from tan_tune.privacy import accountant_registry
from tan_tune.privacy import clipping_bound
# The built-in accountants register themselves, before any scheme is made.
from tan_tune.privacy import run_accountants  # pylint: disable=unused-import
from tan_tune.privacy import samplers
from tan_tune.privacy.clipping_bound import ClippingBound
from tan_tune.privacy.samplers import ADD_REMOVE, ADJACENCIES, DpSampler

DEFAULT_TRUNCATION_STDS = 4.0


@dataclasses.dataclass(frozen=True)
class SamplingScheme:
  """What an accountant assumes of one step: how batches are drawn, the
  adjacency, and the clipping engine's bound on one example.

  Attributes:
    sampler: a registered `samplers.DpSampler`, or its spelling, parsed here.
    adjacency: one of ADJACENCIES.
    truncation_stds: for a sampler that truncates (truncated-poisson): the
      cap is B + floor(truncation_stds sqrt(B)).
    bound: the clipping engine's (`Engine.bound`): exact (C) by default.
  """

  sampler: DpSampler | str = "poisson"
  adjacency: str = ADD_REMOVE
  truncation_stds: float = DEFAULT_TRUNCATION_STDS
  bound: ClippingBound = clipping_bound.EXACT

  def __post_init__(self):
    object.__setattr__(self, "sampler", samplers.parse(self.sampler))
    if self.adjacency not in ADJACENCIES:
      raise ConfigError("adjacency", self.adjacency,
                        f"expected one of {', '.join(ADJACENCIES)}")
    covered = [adjacency for adjacency in ADJACENCIES
               if any((type(self.sampler), adjacency) in a.coverage.cells
                      for a in accountant_registry.registered())]
    if self.adjacency not in covered:
      raise ConfigError(
          "adjacency", self.adjacency,
          f"no accountant covers {self.sampler} sampling under it; expected"
          f" {', '.join(covered)}")
    if not (isinstance(self.truncation_stds, (int, float))
            and math.isfinite(self.truncation_stds)
            and self.truncation_stds > 0):
      raise ConfigError("truncation_stds", self.truncation_stds,
                        "expected a finite number > 0")
    if not self.accountants:
      cells = " or ".join(
          f"{sampler.name} sampling under {adjacency} adjacency"
          for a in accountant_registry.registered()
          if a.coverage.bound is type(self.bound)
          for sampler, adjacency in sorted(
              a.coverage.cells, key=lambda cell: (cell[0].name, cell[1])))
      raise ConfigError(
          "sampling", f"{self.sampler} ({self.adjacency})",
          f"{self.bound.describe().lstrip(', ')} is accounted for {cells}"
          " only")

  @property
  def accountants(self) -> tuple[str, ...]:
    """The registered accountants offered for this scheme, the default
    first."""
    return accountant_registry.offered_for(self)

  @property
  def default_accountant(self) -> str:
    return self.accountants[0]

  def cap(self, batch_size: int) -> int | None:
    """The largest batch a step can see: None when the sampler has no
    bound (Poisson)."""
    return self.sampler.cap(batch_size, self.truncation_stds)

  def describe(self, batch_size: int) -> str:
    """How batches are drawn (and clipped if not exactly), for printing
    beside an eps."""
    return (self.sampler.describe(batch_size, self.cap(batch_size))
            + self.bound.describe())

  def require_accountant(self, accountant: str) -> None:
    if accountant not in self.accountants:
      clipping = ("" if self.bound.exact else
                  f" with{self.bound.describe().lstrip(',')} (RDP is"
                  " infinite for it)")
      raise ConfigError(
          "accountant", accountant,
          f"{self.sampler} sampling under {self.adjacency} adjacency{clipping}"
          f" is accounted by {', '.join(self.accountants)}")


POISSON = SamplingScheme()
