"""The privacy calculator's spellings, and what they become.

A command line lists them in its --help before anything is computed, so
this module loads the registries alone, not the calculator. A spelling is
parsed once, here, into the object the API takes; code then asks the
object, never the text. Samplers and accountants are registries
(`privacy/samplers.py`, `privacy/accountant_registry.py`): one registered
after this module was imported is listed and parsed like a built-in.

* `accountant_names`: the accountants a run's scheme may name (`rdp`,
  `prv`, ...); which covers which sampler, each declares.
* `sampler_names`, `parse_sampler`, `DpSampler`: how batches are drawn
  (`poisson`, `fixed`, ...); DEFAULT_SAMPLER when unsaid.
* `Clipping`: how per-example norms are taken, exactly or estimated from r
  random projections (JL).
* `AccountantLimit`: a valid setting an accountant cannot compute.
"""

import enum
from typing import Any

from tan_tune.privacy import accountant_registry
from tan_tune.privacy import samplers
from tan_tune.privacy import sampling_scheme
# Re-exported as the API's own, so that its reference renders the classes.
from tan_tune.privacy.limits import AccountantLimit
from tan_tune.privacy.samplers import DpSampler

DEFAULT_SAMPLER = sampling_scheme.POISSON.sampler
"""The sampler of a scheme that names none: Poisson."""


def accountant_names() -> tuple[str, ...]:
  """The registered accountants a scheme may name, in the order they were
  registered (`rdp`, `prv`, `pld`, ... for the built-ins)."""
  return accountant_registry.offered_names()


def sampler_names() -> tuple[str, ...]:
  """The registered samplers' spellings, in the order they were registered."""
  return samplers.names()


def parse_sampler(text: Any) -> DpSampler:
  """The registered sampler spelled `text` (a sampler gives its own).

  Args:
    text: a spelling of `sampler_names` ('poisson', 'fixed', ...), or a
      `DpSampler`.

  Raises:
    ConfigError: field `sampling`: no sampler is spelled so.
  """
  return samplers.parse(text)


class Clipping(str, enum.Enum):
  """How per-example gradient norms are taken. A value is its spelling;
  JL estimates each norm from r random projections, so its bound needs r
  (`privacy/clipping_bound.py`)."""

  EXACT = "exact"
  JL = "jl"

  def __str__(self) -> str:
    return self.value

  @property
  def projected(self) -> bool:
    """Norms estimated from random projections: the bound needs their
    number r, and only JL's own accountant (PLD-JL) covers it."""
    return self is Clipping.JL


CLIPPINGS = tuple(clipping.value for clipping in Clipping)
"""The spellings of `Clipping`: 'exact' and 'jl'."""
