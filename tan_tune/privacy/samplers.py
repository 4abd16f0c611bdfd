"""DP samplers: how each step draws its batch, and what accountants see of it.

A sampler is one `DpSampler` class registered with `register`, found by its
spelling (the one search files, CLI flags and MLflow params use) with
`parse`. It draws one step's batch of example indices (`draw`, from the
run's torch generator) and gives the mechanism that the accountants covering
it compose (each accountant declares which it covers,
`accountant_registry.py`): `rdp_per_step`, one step's Renyi DP under an
adjacency, for the RDP accountants, and `pld_event`, the step as
dp_accounting's event, for the PLD accountant. The built-ins, registered
here as a user's sampler is:

* `poisson`: each example joins each batch on its own coin of probability
  q = B / N, so batches vary in size (mean B, variance B (1 - q)) and may be
  empty; its add/remove-one RDP is exact at every order
  (`sampled_gaussian.py`), its replace-one RDP a Taylor bound;
* `truncated-poisson`: Poisson, then a uniformly random `cap` of them when
  more were drawn, cap = B + floor(truncation_stds sqrt(B)) (Poisson's batch
  size has standard deviation about sqrt(B)); batches are padded to the cap
  with zero-weight rows, so every step has the same shapes and memory. It
  has no RDP curve: dp_accounting's `TruncatedSubsampledGaussianDpEvent`
  gives its PLD;
* `fixed`: B distinct indices, uniformly without replacement (Birrell et
  al. 2024, `fixed_size.py`);
* `fixed-with-replacement`: B independent uniform draws; an example drawn
  twice counts twice. Its RDP bound is loose, so it also gives a floor no
  RDP accountant can go below.

The Poisson samplers may draw over a universe of N rows of which only the
first `rows` are present (an audit's training set among all its canaries):
each present row joins with probability q = B / N and an absent one never
does, which is Poisson sampling of the universe, so the accountant's q and
N are the universe's. The fixed-size ones draw B among all N rows.

A sampler of your own:

    @samplers.register
    class Shuffled(samplers.Fixed):
      name = "shuffled"
      def draw(self, generator, dataset_size, rows, batch_size, cap): ...

    run_accountants.Rdp.cover(Shuffled, samplers.ADD_REMOVE)

Adjacency, the neighbouring datasets a guarantee is for: `add/remove-one`
(one dataset has one more example) or `replace-one` (one example differs).
"""

from __future__ import annotations

import abc
import inspect
import math
from typing import Any, ClassVar, TYPE_CHECKING

from dp_accounting import dp_event
import numpy as np

from tan_tune.errors import ConfigError
from tan_tune.privacy import mechanisms

# torch is imported where a batch is drawn: the privacy calculator lists the
# samplers but never draws, and torch takes seconds to import.
if TYPE_CHECKING:
  import torch

ADD_REMOVE = "add/remove-one"
REPLACE_ONE = "replace-one"
ADJACENCIES = (ADD_REMOVE, REPLACE_ONE)


class DpSampler(str, abc.ABC):
  """How batches are drawn. An instance is its spelling (a str), so it
  prints, sorts and serialises as the spelling; `parse` makes one from it.

  Attributes:
    name: the spelling.
    independent_membership: each example joins a batch on its own coin, of
      probability q, whatever the others do. Then q may be taken over a
      universe of which only some rows are present (an absent row is one
      never drawn), and a batch's size says nothing of how many are present.
  """

  name: ClassVar[str]
  independent_membership: ClassVar[bool]

  def __new__(cls) -> "DpSampler":
    return super().__new__(cls, cls.name)

  def __reduce__(self) -> tuple[Any, ...]:
    return type(self), ()

  @abc.abstractmethod
  def cap(self, batch_size: int, truncation_stds: float) -> int | None:
    """The largest batch a step can see (None: no bound), given the scheme's
    truncation (for samplers that truncate)."""

  @abc.abstractmethod
  def describe(self, batch_size: int, cap: int | None) -> str:
    """How batches are drawn, for printing beside an eps."""

  @abc.abstractmethod
  def draw(self, generator: torch.Generator, dataset_size: int, rows: int,
           batch_size: int, cap: int | None
           ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One step's batch, all its randomness from `generator`.

    Args:
      generator: the run's sampling stream (checkpointed with the run).
      dataset_size: N, of the rate q = B / N.
      rows: the rows present, indices 0..rows-1; fewer than N only where
        `independent_membership` holds.
      batch_size: B.
      cap: `cap(B, ...)` of the run's scheme.

    Returns:
      int64 indices, sorted; and float weights, 1 for a drawn row and 0 for
      padding (padding rows repeat index 0), or None without padding.
    """

  def rdp_per_step(self, adjacency: str, dataset_size: int, batch_size: int,
                   sigma: float) -> np.ndarray:
    """One step's RDP at each of `mechanisms.RDP_ORDERS` (inf where not
    bounded), for the RDP accountants that cover this sampler."""
    raise NotImplementedError(f"{self} sampling under {adjacency} adjacency"
                              " has no RDP curve")

  def pld_event(self, dataset_size: int, batch_size: int, sigma: float,
                cap: int | None) -> dp_event.DpEvent:
    """One step as dp_accounting's event, for the PLD accountant."""
    raise NotImplementedError(f"{self} sampling has no PLD event")

  def rdp_lower_bound(self, dataset_size: int, batch_size: int,
                      sigma: float) -> np.ndarray | None:
    """A lower bound on any RDP curve of one step (add/remove-one), where
    the upper bound may be far from the truth; None by default."""
    del dataset_size, batch_size, sigma
    return None


_REGISTRY: dict[str, DpSampler] = {}


def register(cls: type[DpSampler]) -> type[DpSampler]:
  """Class decorator: makes a sampler available by its name.

  Raises:
    TypeError: `cls` leaves an abstract method unimplemented.
    ValueError: another sampler has the name.
  """
  if inspect.isabstract(cls):
    raise TypeError(f"{cls.__name__} does not implement"
                    f" {', '.join(sorted(cls.__abstractmethods__))}")
  if cls.name in _REGISTRY:
    raise ValueError(f"a sampler is already registered as {cls.name!r}:"
                     f" {type(_REGISTRY[cls.name]).__qualname__}")
  _REGISTRY[cls.name] = cls()
  return cls


def parse(text: Any) -> DpSampler:
  """The registered sampler spelled `text` (a sampler gives its own).

  Raises:
    ConfigError: no sampler is spelled so.
  """
  sampler = _REGISTRY.get(text) if isinstance(text, str) else None
  if sampler is None:
    raise ConfigError("sampling", text, f"expected one of {', '.join(names())}")
  return sampler


def names() -> tuple[str, ...]:
  """The registered samplers' spellings, in the order they were registered."""
  return tuple(_REGISTRY)


def registered() -> tuple[DpSampler, ...]:
  """The registered samplers, in the order they were registered."""
  return tuple(_REGISTRY.values())


# The built-ins, registered as a user's sampler is.


@register
class Poisson(DpSampler):
  """Each example independently with probability q = B / N."""

  name = "poisson"
  independent_membership = True

  def cap(self, batch_size: int, truncation_stds: float) -> int | None:
    del batch_size, truncation_stds
    return None

  def describe(self, batch_size: int, cap: int | None) -> str:
    del batch_size, cap
    return "Poisson sampling at q = B/N"

  def draw(self, generator: torch.Generator, dataset_size: int, rows: int,
           batch_size: int, cap: int | None
           ) -> tuple[torch.Tensor, torch.Tensor | None]:
    del cap
    return _coin_flips(generator, dataset_size, rows, batch_size), None

  def rdp_per_step(self, adjacency: str, dataset_size: int, batch_size: int,
                   sigma: float) -> np.ndarray:
    curves = {ADD_REMOVE: mechanisms.poisson_rdp,
              REPLACE_ONE: mechanisms.poisson_replace_one_rdp}
    return curves[adjacency](batch_size / dataset_size, sigma)

  def pld_event(self, dataset_size: int, batch_size: int, sigma: float,
                cap: int | None) -> dp_event.DpEvent:
    del cap
    return dp_event.PoissonSampledDpEvent(batch_size / dataset_size,
                                          dp_event.GaussianDpEvent(sigma))


@register
class TruncatedPoisson(DpSampler):
  """Poisson, then a uniformly random `cap` of the drawn when more were
  drawn; padded to the cap."""

  name = "truncated-poisson"
  independent_membership = True

  def cap(self, batch_size: int, truncation_stds: float) -> int | None:
    return batch_size + math.floor(truncation_stds * math.sqrt(batch_size))

  def describe(self, batch_size: int, cap: int | None) -> str:
    return f"Poisson sampling at q = B/N truncated at {cap}"

  def draw(self, generator: torch.Generator, dataset_size: int, rows: int,
           batch_size: int, cap: int | None
           ) -> tuple[torch.Tensor, torch.Tensor | None]:
    import torch  # pylint: disable=g-import-not-at-top
    indices = _coin_flips(generator, dataset_size, rows, batch_size)
    if len(indices) > cap:  # Keep a uniformly random cap of them.
      keep = torch.randperm(len(indices), generator=generator)[:cap]
      indices = indices[keep.sort().values]
    padding = cap - len(indices)
    weights = torch.ones(cap)
    weights[len(indices):] = 0
    return torch.cat([indices, indices.new_zeros(padding)]), weights

  def pld_event(self, dataset_size: int, batch_size: int, sigma: float,
                cap: int | None) -> dp_event.DpEvent:
    return dp_event.TruncatedSubsampledGaussianDpEvent(
        dataset_size, batch_size / dataset_size, cap, sigma)


def _coin_flips(generator: torch.Generator, dataset_size: int, rows: int,
                batch_size: int) -> torch.Tensor:
  """The present rows whose coin of probability q = B / N came up."""
  import torch  # pylint: disable=g-import-not-at-top
  draws = torch.rand(rows, generator=generator)
  return torch.nonzero(draws < batch_size / dataset_size).flatten()


class _FixedSize(DpSampler):
  """B rows every step, so the batch size says nothing."""

  independent_membership = False
  replacement: ClassVar[str]  # 'with' or 'without'.

  def cap(self, batch_size: int, truncation_stds: float) -> int | None:
    del truncation_stds
    return batch_size

  def describe(self, batch_size: int, cap: int | None) -> str:
    del cap
    return f"fixed-size batches of {batch_size} {self.replacement} replacement"


@register
class Fixed(_FixedSize):
  """B distinct indices, uniformly without replacement."""

  name = "fixed"
  replacement = "without"

  def draw(self, generator: torch.Generator, dataset_size: int, rows: int,
           batch_size: int, cap: int | None
           ) -> tuple[torch.Tensor, torch.Tensor | None]:
    import torch  # pylint: disable=g-import-not-at-top
    del rows, cap
    chosen = torch.randperm(dataset_size, generator=generator)[:batch_size]
    return chosen.sort().values, None

  def rdp_per_step(self, adjacency: str, dataset_size: int, batch_size: int,
                   sigma: float) -> np.ndarray:
    curves = {ADD_REMOVE: mechanisms.fswor_add_remove_rdp,
              REPLACE_ONE: mechanisms.fswor_replace_one_rdp}
    return curves[adjacency](batch_size / dataset_size, sigma)


@register
class FixedWithReplacement(_FixedSize):
  """B independent uniform draws."""

  name = "fixed-with-replacement"
  replacement = "with"

  def draw(self, generator: torch.Generator, dataset_size: int, rows: int,
           batch_size: int, cap: int | None
           ) -> tuple[torch.Tensor, torch.Tensor | None]:
    import torch  # pylint: disable=g-import-not-at-top
    del rows, cap
    drawn = torch.randint(dataset_size, (batch_size,), generator=generator)
    return drawn.sort().values, None

  def rdp_per_step(self, adjacency: str, dataset_size: int, batch_size: int,
                   sigma: float) -> np.ndarray:
    curves = {ADD_REMOVE: mechanisms.fswr_add_remove_rdp}
    return curves[adjacency](dataset_size, batch_size, sigma)

  def rdp_lower_bound(self, dataset_size: int, batch_size: int,
                      sigma: float) -> np.ndarray | None:
    return mechanisms.fswr_rdp_lower_bound(dataset_size, batch_size, sigma)
