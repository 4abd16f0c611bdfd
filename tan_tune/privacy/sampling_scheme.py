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
`replace-one` (one example differs). Each accountant declares what it covers,
once, in COVERAGE: (sampler, adjacency) pairs and a clipping bound. A scheme's
accountants and its validation, and `accountants.py`'s `covers`, derive from
it; for exact clipping it gives each pair these, the first its default:

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
clipping has its own accountant, `pld-jl`, for Poisson add/remove-one.
"""

import dataclasses
import enum
import math

from tan_tune.errors import ConfigError
from tan_tune.privacy import clipping_bound
from tan_tune.privacy.clipping_bound import ClippingBound, ExactBound, JlBound


class Sampler(str, enum.Enum):
  """How batches are drawn. A value is the spelling that search files, CLI
  flags and MLflow params use; `parse` is where a spelling becomes a member,
  and code compares members."""

  POISSON = "poisson"
  TRUNCATED_POISSON = "truncated-poisson"
  FIXED = "fixed"
  FIXED_WITH_REPLACEMENT = "fixed-with-replacement"

  def __str__(self) -> str:
    return self.value

  @classmethod
  def parse(cls, text: "str | Sampler") -> "Sampler":
    """The sampler spelled `text` (a member is returned as is).

    Raises:
      ConfigError: no sampler is spelled so.
    """
    try:
      return cls(text)
    except ValueError:
      raise ConfigError("sampling", text, "expected one of"
                        f" {', '.join(SAMPLERS)}") from None


SAMPLERS = tuple(Sampler)
ADD_REMOVE = "add/remove-one"
REPLACE_ONE = "replace-one"
ADJACENCIES = (ADD_REMOVE, REPLACE_ONE)
DEFAULT_TRUNCATION_STDS = 4.0


@dataclasses.dataclass(frozen=True)
class Coverage:
  """What one accountant accounts for.

  Attributes:
    cells: the (sampler, adjacency) pairs it is offered for.
    bound: the clipping bound it is offered for; an accountant of JL's bound
      also composes exact-clipping runs of its cells.
    default_for: cells where it is the default although an accountant listed
      before it in COVERAGE covers them too.
  """

  cells: frozenset[tuple[Sampler, str]]
  bound: type[ClippingBound] = ExactBound
  default_for: frozenset[tuple[Sampler, str]] = frozenset()

  def offered(self, scheme: "SamplingScheme") -> bool:
    """Among `scheme.accountants`: one a user may pick for it."""
    return ((scheme.sampler, scheme.adjacency) in self.cells
            and isinstance(scheme.bound, self.bound))

  def covers(self, scheme: "SamplingScheme") -> bool:
    """Accounts a run under `scheme`: offered for it, or its clipping is
    exact, which every bound's accountant covers."""
    return ((scheme.sampler, scheme.adjacency) in self.cells
            and (scheme.bound.exact or isinstance(scheme.bound, self.bound)))


# The accountants a scheme may name, in the order it lists them; a cell's
# default is the first that covers it unless one declares `default_for`.
# `accountants.py` registers each by name (and rdp-repeat-and-select, for
# searches, declares its own `covers`).
COVERAGE = {
    "rdp": Coverage(frozenset({
        (Sampler.POISSON, ADD_REMOVE), (Sampler.POISSON, REPLACE_ONE),
        (Sampler.FIXED, ADD_REMOVE), (Sampler.FIXED, REPLACE_ONE),
        (Sampler.FIXED_WITH_REPLACEMENT, ADD_REMOVE)})),
    "prv": Coverage(frozenset({(Sampler.POISSON, ADD_REMOVE)})),
    "pld": Coverage(frozenset({
        (Sampler.POISSON, ADD_REMOVE), (Sampler.POISSON, REPLACE_ONE),
        (Sampler.TRUNCATED_POISSON, ADD_REMOVE),
        (Sampler.TRUNCATED_POISSON, REPLACE_ONE)}),
        # Poisson replace-one has only RDP's Taylor bound (`fixed_size.py`).
        default_for=frozenset({(Sampler.POISSON, REPLACE_ONE)})),
    "rdp-wang": Coverage(frozenset({(Sampler.FIXED, REPLACE_ONE)})),
    "pld-jl": Coverage(frozenset({(Sampler.POISSON, ADD_REMOVE)}), JlBound),
}
ACCOUNTANTS = tuple(COVERAGE)


@dataclasses.dataclass(frozen=True)
class SamplingScheme:
  """What an accountant assumes of one step: how batches are drawn, the
  adjacency, and the clipping engine's bound on one example.

  Attributes:
    sampler: a `Sampler`, or its spelling, parsed here.
    adjacency: one of ADJACENCIES.
    truncation_stds: truncated-poisson only: the cap is
      B + floor(truncation_stds sqrt(B)).
    bound: the clipping engine's (`Engine.bound`): exact (C) by default.
  """

  sampler: Sampler = Sampler.POISSON
  adjacency: str = ADD_REMOVE
  truncation_stds: float = DEFAULT_TRUNCATION_STDS
  bound: ClippingBound = clipping_bound.EXACT

  def __post_init__(self):
    object.__setattr__(self, "sampler", Sampler.parse(self.sampler))
    if self.adjacency not in ADJACENCIES:
      raise ConfigError("adjacency", self.adjacency,
                        f"expected one of {', '.join(ADJACENCIES)}")
    covered = [adjacency for adjacency in ADJACENCIES
               if any((self.sampler, adjacency) in coverage.cells
                      for coverage in COVERAGE.values())]
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
          f"{sampler} sampling under {adjacency} adjacency"
          for coverage in COVERAGE.values()
          if coverage.bound is type(self.bound)
          for sampler, adjacency in sorted(coverage.cells))
      raise ConfigError(
          "sampling", f"{self.sampler} ({self.adjacency})",
          f"{self.bound.describe().lstrip(', ')} is accounted for {cells}"
          " only")

  @property
  def accountants(self) -> tuple[str, ...]:
    """The accountants offered for this scheme (COVERAGE), the default
    first."""
    offered = [name for name, coverage in COVERAGE.items()
               if coverage.offered(self)]
    default = [name for name in offered
               if (self.sampler, self.adjacency) in COVERAGE[name].default_for]
    return tuple(default + [name for name in offered if name not in default])

  @property
  def default_accountant(self) -> str:
    return self.accountants[0]

  @property
  def poisson(self) -> bool:
    """Each example joins a batch on its own coin of probability q (then a
    cap, if truncated): q may be taken over a universe of which only some
    rows are present, an absent row being one never drawn."""
    return self.sampler in (Sampler.POISSON, Sampler.TRUNCATED_POISSON)

  def cap(self, batch_size: int) -> int | None:
    """The largest batch a step can see: None when Poisson has no bound."""
    if self.sampler is Sampler.POISSON:
      return None
    if self.sampler is Sampler.TRUNCATED_POISSON:
      return batch_size + math.floor(self.truncation_stds * math.sqrt(batch_size))
    return batch_size

  def describe(self, batch_size: int) -> str:
    """How batches are drawn (and clipped if not exactly), for printing
    beside an eps."""
    return self._describe_sampler(batch_size) + self.bound.describe()

  def _describe_sampler(self, batch_size: int) -> str:
    if self.sampler is Sampler.POISSON:
      return "Poisson sampling at q = B/N"
    if self.sampler is Sampler.TRUNCATED_POISSON:
      return (f"Poisson sampling at q = B/N truncated at"
              f" {self.cap(batch_size)}")
    if self.sampler is Sampler.FIXED:
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
