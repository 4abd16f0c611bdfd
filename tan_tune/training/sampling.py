"""The samplers of `privacy/sampling_scheme.py`, and physical micro-batches.

Each step draws one logical batch of example indices; the accountant of the
run's scheme assumes exactly this draw:

* `poisson`: each example independently with probability q = B / N, so
  batches vary in size (mean B, variance B (1 - q)) and may be empty;
* `truncated-poisson`: Poisson, then a uniformly random `cap` of them when
  more were drawn (dp_accounting's `TruncatedSubsampledGaussianDpEvent`);
* `fixed`: B distinct indices, uniformly without replacement;
* `fixed-with-replacement`: B independent uniform draws; an example drawn
  twice counts twice.

The Poisson samplers may draw over a universe of N rows of which only the
first `rows` are present (an audit's training set among all its canaries,
`canaries.py`): each present row joins with probability q = B / N and an
absent one never does, which is Poisson sampling of the universe, so the
accountant's q and N are the universe's, whatever is present.

Samplers with a cap pad every batch to it with zero-weight rows, so every step
has the same shapes and the same memory. Memory does not follow the logical
batch: it is cut into micro-batches of at most `max_physical_batch` rows
whose clipped gradients are summed before the step's single noise draw.
"""

import dataclasses

import torch

from tan_tune.privacy import sampling_scheme
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
    rows: the rows present, indices 0..rows-1; fewer than N for a Poisson
      sampler over a universe only.
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
    if rows < dataset_size and not scheme.poisson:
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
    sampler = self.scheme.sampler
    if sampler is sampling_scheme.Sampler.FIXED:
      chosen = torch.randperm(self.dataset_size,
                              generator=self.generator)[:self.batch_size]
      return LogicalBatch(chosen.sort().values)
    if sampler is sampling_scheme.Sampler.FIXED_WITH_REPLACEMENT:
      drawn = torch.randint(self.dataset_size, (self.batch_size,),
                            generator=self.generator)
      return LogicalBatch(drawn.sort().values)
    draws = torch.rand(self.rows, generator=self.generator)
    indices = torch.nonzero(draws < self.sampling_rate).flatten()
    if sampler is sampling_scheme.Sampler.POISSON:
      return LogicalBatch(indices)
    if len(indices) > self.cap:  # Keep a uniformly random cap of them.
      keep = torch.randperm(len(indices), generator=self.generator)[:self.cap]
      indices = indices[keep.sort().values]
    return _padded(indices, self.cap)


def _padded(indices: torch.Tensor, size: int) -> LogicalBatch:
  padding = size - len(indices)
  weights = torch.ones(size)
  weights[len(indices):] = 0
  return LogicalBatch(
      torch.cat([indices, indices.new_zeros(padding)]), weights)


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
