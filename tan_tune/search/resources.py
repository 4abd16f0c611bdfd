"""What Ray reserves for each trial of a search: CPUs and a share of a GPU."""

import dataclasses
from typing import Any

from tan_tune.search.hyperparameters import check
from tan_tune.search.hyperparameters import is_number


@dataclasses.dataclass(frozen=True)
class ResourcesConfig:
  """What Ray reserves for each trial.

  Attributes:
    cpu: CPUs per trial.
    gpu: GPUs per trial; a fraction packs several trials on one GPU (0.25:
      four at a time).
    gpu_by_batch_size: GPUs per trial by simulation batch size, for spaces
      whose small batches need less of a GPU than their large ones; a batch
      size not listed takes `gpu`.
  """

  cpu: float = 1.0
  gpu: float = 0.0
  gpu_by_batch_size: dict[int, float] | None = None

  def __post_init__(self) -> None:
    check(self.cpu > 0, "cpu", self.cpu, "a number > 0")
    _check_gpus("gpu", self.gpu)
    for batch_size, gpu in (self.gpu_by_batch_size or {}).items():
      check(isinstance(batch_size, int) and batch_size >= 1,
             "gpu_by_batch_size", batch_size, "batch sizes (integers >= 1)"
             " as keys")
      _check_gpus("gpu_by_batch_size", gpu, f" (batch size {batch_size})")

  def gpu_for(self, batch_size: int) -> float:
    """The GPUs a trial at this simulation batch size reserves."""
    return (self.gpu_by_batch_size or {}).get(batch_size, self.gpu)

  def uses_gpus(self) -> bool:
    return self.gpu > 0 or any((self.gpu_by_batch_size or {}).values())


def _check_gpus(field: str, gpu: Any, which: str = "") -> None:
  # Ray only splits a single GPU.
  check(is_number(gpu) and (0 <= gpu <= 1 or float(gpu).is_integer()),
         field, gpu, f"a fraction in [0, 1] or a whole number of GPUs{which}")
