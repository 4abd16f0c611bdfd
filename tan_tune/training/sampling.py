"""Logical batches drawn by the run's sampler, and physical micro-batches.

Each step draws one logical batch of example indices with the scheme's
registered sampler (`privacy/samplers.py`: poisson, truncated-poisson,
fixed, fixed-with-replacement, or your own), which the run's accountant
assumes exactly. A sampler whose examples join independently may draw over
a universe of N rows of which only the first `rows` are present (an audit's
training set among all its canaries, `canaries.py`); the accountant's q and
N are then the universe's, whatever is present.

Samplers with a cap pad every batch to it with zero-weight rows, so every step
has the same shapes and the same memory. Memory does not follow the logical
batch: it is cut into micro-batches of at most `max_physical_batch` rows
whose clipped gradients are summed before the step's single noise draw.
"""

import dataclasses

import torch

from tan_tune.privacy.sampling_scheme import SamplingScheme


@dataclasses.dataclass(frozen=True)
class LogicalBatch:
  """One step's draw.

  Attributes:
    indices: int64 example indices, sorted; padding rows repeat index 0.
    weights: float 1 for a drawn row, 0 for padding; None without padding.
  """

  indices: torch.Tensor
  weights: torch.Tensor | None = None

  def shard(self, rank: int, world_size: int) -> "LogicalBatch":
    """Worker `rank`'s share of the rows (every worker drew the same batch)."""
    return LogicalBatch(
        self.indices[rank::world_size],
        None if self.weights is None else self.weights[rank::world_size])


class Sampler:
  """Draws logical batches for a `SamplingScheme`.

  All randomness comes from `generator`, whose state the trial checkpoints, so
  a resumed run draws the same batches as one never stopped.

  Attributes:
    dataset_size: N, of the rate q = B / N.
    rows: the rows present, indices 0..rows-1; fewer than N only for a
      sampler whose examples join independently, over a universe.
  """

  def __init__(
      self, scheme: SamplingScheme, dataset_size: int, batch_size: int,
      generator: torch.Generator, rows: int | None = None,
  ):
    if not 0 < batch_size <= dataset_size:
      raise ValueError(
          f"batch_size must be in [1, {dataset_size}], got {batch_size}"
      )
    rows = dataset_size if rows is None else rows
    if not 0 <= rows <= dataset_size:
      raise ValueError(f"rows must be in [0, {dataset_size}], got {rows}")
    if rows < dataset_size and not scheme.sampler.independent_membership:
      # B drawn among the rows present: the rate would be B / rows.
      raise ValueError(f"{scheme.sampler} sampling has no universe: rows"
                       f" must be N = {dataset_size}, got {rows}")
    self.scheme = scheme
    self.dataset_size = dataset_size
    self.rows = rows
    self.batch_size = batch_size
    self.sampling_rate = batch_size / dataset_size
    self.cap = scheme.cap(batch_size)
    self.generator = generator

  def sample(self) -> LogicalBatch:
    return LogicalBatch(*self.scheme.sampler.draw(
        self.generator, self.dataset_size, self.rows, self.batch_size,
        self.cap))


def micro_batches(
    batch: LogicalBatch, max_physical_batch: int
) -> list[LogicalBatch]:
  """Splits a logical batch into consecutive chunks of bounded size."""
  if max_physical_batch < 1:
    raise ValueError(f"max_physical_batch must be >= 1, got {max_physical_batch}")
  if not len(batch.indices):  # An empty batch: the step adds noise only.
    return []
  indices = torch.split(batch.indices, max_physical_batch)
  if batch.weights is None:
    return [LogicalBatch(chunk) for chunk in indices]
  return [LogicalBatch(chunk, weights) for chunk, weights
          in zip(indices, torch.split(batch.weights, max_physical_batch))]
