"""Accountants: one registered class each, declaring what it covers.

An accountant composes events (`accountants.py`: runs and private searches)
into one epsilon at a delta. Each declares its `coverage` once: the
(sampler, adjacency) pairs and the clipping bound it is offered for. A
scheme lists its accountants from the registered ones, in the order they
were registered, the default first (`SamplingScheme.accountants`), and is
refused when none covers it; an accountant composes a run whose pair and
bound it declares. `named` is the one place an accountant is found by its
name.

A new sampler is covered by registering an accountant for it, or by
extending a built-in's coverage with `cover`, for a sampler that gives the
mechanism that accountant composes (`samplers.py`):

    run_accountants.Rdp.cover(MySampler, samplers.ADD_REMOVE)
"""

import abc
import dataclasses
from typing import Any, ClassVar, Sequence

from tan_tune.errors import ConfigError
from tan_tune.privacy import samplers
from tan_tune.privacy.clipping_bound import ClippingBound, ExactBound

Cell = tuple[type[samplers.DpSampler], str]  # A sampler's class and an adjacency.


@dataclasses.dataclass(frozen=True)
class Coverage:
  """What one accountant accounts for.

  Attributes:
    cells: the (sampler class, adjacency) pairs it is offered for.
    bound: the clipping bound it is offered for; an accountant of JL's bound
      also composes exact-clipping runs of its cells.
    default_for: cells where it is the default although an accountant
      registered before it covers them too.
  """

  cells: frozenset[Cell] = frozenset()
  bound: type[ClippingBound] = ExactBound
  default_for: frozenset[Cell] = frozenset()

  def offered(self, scheme: Any) -> bool:
    """Among `scheme.accountants`: one a user may pick for it."""
    return (_cell(scheme) in self.cells
            and isinstance(scheme.bound, self.bound))

  def covers(self, scheme: Any) -> bool:
    """Accounts a run under `scheme`: offered for it, or its clipping is
    exact, which every bound's accountant covers."""
    return _cell(scheme) in self.cells and (
        scheme.bound.exact or isinstance(scheme.bound, self.bound))

  def default(self, scheme: Any) -> bool:
    return _cell(scheme) in self.default_for


class Accountant(abc.ABC):
  """Composes events into one epsilon at a delta.

  Attributes:
    name: how configs, the ledger and the CLI name it.
    coverage: the schemes it is offered for (none unless declared).
  """

  name: ClassVar[str]
  coverage: ClassVar[Coverage] = Coverage()

  @classmethod
  def cover(cls, sampler: type[samplers.DpSampler], *adjacencies: str) -> None:
    """Extends this accountant's coverage to `sampler` under each of
    `adjacencies`.

    Raises:
      ValueError: an adjacency is not one of samplers.ADJACENCIES.
    """
    unknown = [a for a in adjacencies if a not in samplers.ADJACENCIES]
    if unknown:
      raise ValueError(f"adjacencies are {', '.join(samplers.ADJACENCIES)},"
                       f" not {', '.join(unknown)}")
    cls.coverage = dataclasses.replace(
        cls.coverage,
        cells=cls.coverage.cells | {(sampler, a) for a in adjacencies})

  def covers(self, event: Any) -> bool:
    """Accounts `event`: a run whose scheme `coverage` covers; a private
    search only where an accountant says so."""
    return event.covered_by(self.coverage)

  def epsilon(self, events: Sequence[Any], delta: float) -> float:
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

  def _check_reach(self, event: Any, delta: float) -> None:
    """Raises limits.AccountantLimit where this accountant cannot compute
    `event`; RDP's closed forms cost the same for any setting."""

  @abc.abstractmethod
  def _epsilon(self, events: Sequence[Any], delta: float) -> float:
    ...


_REGISTRY: dict[str, Accountant] = {}


def register(cls: type[Accountant]) -> type[Accountant]:
  """Class decorator: makes an accountant available by its name.

  Raises:
    ValueError: another accountant has the name.
  """
  if cls.name in _REGISTRY:
    raise ValueError(f"an accountant is already registered as {cls.name!r}:"
                     f" {type(_REGISTRY[cls.name]).__qualname__}")
  _REGISTRY[cls.name] = cls()
  return cls


def named(name: str) -> Accountant:
  """The registered accountant called `name`.

  Raises:
    ConfigError: none is.
  """
  if name not in _REGISTRY:
    raise ConfigError("accountant", name,
                      f"expected one of {', '.join(_REGISTRY)}")
  return _REGISTRY[name]


def registered() -> tuple[Accountant, ...]:
  """The registered accountants, in the order they were registered."""
  return tuple(_REGISTRY.values())


def offered_names() -> tuple[str, ...]:
  """The names a scheme may list: accountants with a declared coverage."""
  return tuple(a.name for a in registered() if a.coverage.cells)


def offered_for(scheme: Any) -> tuple[str, ...]:
  """The accountants offered for `scheme`, the default first."""
  offered = [a for a in registered() if a.coverage.offered(scheme)]
  default = [a for a in offered if a.coverage.default(scheme)]
  return tuple(a.name for a in default + [a for a in offered
                                          if a not in default])


def _cell(scheme: Any) -> Cell:
  return type(scheme.sampler), scheme.adjacency
