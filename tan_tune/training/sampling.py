"""Poisson sampling at rate q = B / N, and physical micro-batches.

DP-SGD's guarantee (and every accountant in `accounting.py`) assumes each
example joins each logical batch independently with probability q = B / N, so
batches vary in size, with mean B and variance B (1 - q), and may be empty.
Memory does not follow the logical batch: it is cut into micro-batches of at
most `max_physical_batch` examples whose clipped gradients are summed before the
step's single noise draw.
"""

import torch


class PoissonSampler:
  """Draws logical batches by independent Bernoulli(q) trials per example.

  All randomness comes from `generator`, whose state the trial checkpoints, so
  a resumed run draws the same batches as one never stopped.
  """

  def __init__(
      self, dataset_size: int, batch_size: int, generator: torch.Generator
  ):
    if not 0 < batch_size <= dataset_size:
      raise ValueError(
          f"batch_size must be in [1, {dataset_size}], got {batch_size}"
      )
    self.dataset_size = dataset_size
    self.sampling_rate = batch_size / dataset_size
    self.generator = generator

  def sample(self) -> torch.Tensor:
    """The indices of one logical batch: int64, sorted, possibly empty."""
    draws = torch.rand(self.dataset_size, generator=self.generator)
    return torch.nonzero(draws < self.sampling_rate).flatten()


def micro_batches(
    indices: torch.Tensor, max_physical_batch: int
) -> list[torch.Tensor]:
  """Splits a logical batch into consecutive chunks of bounded size."""
  if max_physical_batch < 1:
    raise ValueError(f"max_physical_batch must be >= 1, got {max_physical_batch}")
  if not len(indices):  # An empty batch: the step adds noise only.
    return []
  return list(torch.split(indices, max_physical_batch))
