"""How batches are drawn, and which neighbouring datasets a guarantee is for.

An epsilon means nothing without both: the same (N, B, sigma, S) spends
2-3x more with fixed-size batches than with Poisson sampling under
add/remove adjacency (Birrell et al. 2024). Samplers:

* `poisson`: each example joins each batch with probability q = B / N;
* `truncated-poisson`: Poisson, then a random `cap` of them when more are
  drawn, cap = B + truncation_stds sqrt(B) (Poisson's batch size has standard
  deviation about sqrt(B)); batches are padded to the cap with zero-weight
  rows, so every step has the same shapes;
* `fixed`: exactly B distinct examples, uniformly without replacement;
* `fixed-with-replacement`: B independent uniform draws.

Adjacency: `add/remove-one` (one dataset has one more example) or
`replace-one` (one example differs). Each (sampler, adjacency) pair has its
accountants, the first its default:

| sampler | add/remove-one | replace-one |
|---|---|---|
| poisson | rdp, prv, pld | pld, rdp (Taylor bound) |
| truncated-poisson | pld | pld |
| fixed | rdp (theorems 3.1, 3.3) | rdp (theorem 3.4), rdp-wang |
| fixed-with-replacement | rdp (theorem 3.6) | - |

`rdp-wang` is Wang, Balle and Kasiviswanathan (2019) through dp_accounting,
for comparison.

The sensitivity is not the sampler's: it is the clipping engine's
`ClippingBound` (`clipping_bound.py`), which the scheme carries so that an
accountant sees the whole step. Exact clipping keeps the table above; JL
clipping has its own accountant.
"""

import dataclasses
import math

from tan_tune.errors import ConfigError
from tan_tune.privacy import clipping_bound
from tan_tune.privacy.clipping_bound import ClippingBound

SAMPLERS = ("poisson", "truncated-poisson", "fixed", "fixed-with-replacement")
ADD_REMOVE = "add/remove-one"
REPLACE_ONE = "replace-one"
ADJACENCIES = (ADD_REMOVE, REPLACE_ONE)
ACCOUNTANTS = ("rdp", "prv", "pld", "rdp-wang", "pld-jl")
_ACCOUNTANTS = {
    ("poisson", ADD_REMOVE): ("rdp", "prv", "pld"),
    ("poisson", REPLACE_ONE): ("pld", "rdp"),
    ("truncated-poisson", ADD_REMOVE): ("pld",),
    ("truncated-poisson", REPLACE_ONE): ("pld",),
    ("fixed", ADD_REMOVE): ("rdp",),
    ("fixed", REPLACE_ONE): ("rdp", "rdp-wang"),
    ("fixed-with-replacement", ADD_REMOVE): ("rdp",),
}
DEFAULT_TRUNCATION_STDS = 4.0


@dataclasses.dataclass(frozen=True)
class SamplingScheme:
  """What an accountant assumes of one step: how batches are drawn, the
  adjacency, and the clipping engine's bound on one example.

  Attributes:
    sampler: one of SAMPLERS.
    adjacency: one of ADJACENCIES.
    truncation_stds: truncated-poisson only: the cap is
      B + floor(truncation_stds sqrt(B)).
    bound: the clipping engine's (`Engine.bound`): exact (C) by default.
  """

  sampler: str = "poisson"
  adjacency: str = ADD_REMOVE
  truncation_stds: float = DEFAULT_TRUNCATION_STDS
  bound: ClippingBound = clipping_bound.EXACT

  def __post_init__(self):
    if self.sampler not in SAMPLERS:
      raise ConfigError("sampling", self.sampler,
                        f"expected one of {', '.join(SAMPLERS)}")
    if self.adjacency not in ADJACENCIES:
      raise ConfigError("adjacency", self.adjacency,
                        f"expected one of {', '.join(ADJACENCIES)}")
    if (self.sampler, self.adjacency) not in _ACCOUNTANTS:
      raise ConfigError(
          "adjacency", self.adjacency,
          f"no accountant covers {self.sampler} sampling under it; expected"
          f" {ADD_REMOVE}")
    if not (isinstance(self.truncation_stds, (int, float))
            and math.isfinite(self.truncation_stds)
            and self.truncation_stds > 0):
      raise ConfigError("truncation_stds", self.truncation_stds,
                        "expected a finite number > 0")
    self.bound.require_sampling(self.sampler, self.adjacency)

  @property
  def accountants(self) -> tuple[str, ...]:
    """The accountants that cover this scheme, the default first."""
    return self.bound.accountants(_ACCOUNTANTS[(self.sampler, self.adjacency)])

  @property
  def default_accountant(self) -> str:
    return self.accountants[0]

  @property
  def fixed_size(self) -> bool:
    """Every batch has exactly B rows (with padding for truncated-poisson)."""
    return self.sampler != "poisson"

  @property
  def poisson(self) -> bool:
    """Each example joins a batch on its own coin of probability q (then a
    cap, if truncated): q may be taken over a universe of which only some
    rows are present, an absent row being one never drawn."""
    return self.sampler in ("poisson", "truncated-poisson")

  def cap(self, batch_size: int) -> int | None:
    """The largest batch a step can see: None when Poisson has no bound."""
    if self.sampler == "poisson":
      return None
    if self.sampler == "truncated-poisson":
      return batch_size + math.floor(self.truncation_stds * math.sqrt(batch_size))
    return batch_size

  def describe(self, batch_size: int) -> str:
    """How batches are drawn (and clipped if not exactly), for printing
    beside an eps."""
    return self._describe_sampler(batch_size) + self.bound.describe()

  def _describe_sampler(self, batch_size: int) -> str:
    if self.sampler == "poisson":
      return "Poisson sampling at q = B/N"
    if self.sampler == "truncated-poisson":
      return (f"Poisson sampling at q = B/N truncated at"
              f" {self.cap(batch_size)}")
    if self.sampler == "fixed":
      return f"fixed-size batches of {batch_size} without replacement"
    return f"fixed-size batches of {batch_size} with replacement"

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
