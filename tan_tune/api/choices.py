"""The privacy calculator's spellings, and what they become.

Light to import (the samplers' module and the accountants' limits, no
accountant itself): a command line lists them in its --help before
anything is computed. A spelling is parsed once, here or by `Sampler.parse`,
into the object the API takes; code then asks the object, never the text.

* ACCOUNTANTS: the accountants a run's scheme may name (`rdp`, `prv`, ...);
  which of them covers which sampler is the samplers' own table
  (`privacy/sampling_scheme.py`).
* SAMPLERS, `Sampler`: how batches are drawn (`poisson`, `fixed`, ...).
* `Clipping`: how per-example norms are taken, exactly or estimated from r
  random projections (JL).
* `AccountantLimit`: a valid setting an accountant cannot compute.
"""

import enum

from tan_tune.privacy import limits
from tan_tune.privacy import sampling_scheme

ACCOUNTANTS = sampling_scheme.ACCOUNTANTS
SAMPLERS = sampling_scheme.SAMPLERS
Sampler = sampling_scheme.Sampler
AccountantLimit = limits.AccountantLimit


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
