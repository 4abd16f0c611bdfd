"""One DP-SGD step with augmentation multiplicity (TAN paper, eq. 5).

For a logical batch B_t drawn by Poisson sampling with expected size B, each
example i contributes the mean gradient over its K augmented copies, clipped to
norm C before anything is summed:

    g_i = (1/K) sum_j grad l(w; aug_j(x_i)),        clip_C(g) = g min(1, C / |g|),

    w <- w - lr ( sum_{i in B_t} clip_C(g_i) + N(0, sigma^2 C^2 I) ) / B.

Dividing by the expected B (not |B_t|) keeps the sensitivity at C / B, which is
what the accountant assumes. The clipped g_i are summed by one of the
engines of `clipping.py`: without materialising them (`fast_clipping`: ghost
norms or per-layer instantiation from stored activations), from per-sample
gradients of `torch.func` (a `vmap` over examples of the gradient of the mean
loss over one example's K copies), or with norms estimated from random
projections (`jl_clipping`). Averaging over K always happens before
clipping. The logical batch is processed in micro-batches whose clipped sums
are added up before the single noise draw of the step.

Data-parallel training splits B_t over workers: each sums its share of the
clipped g_i, the sums are all-reduced, and every worker adds the same noise
draw (its noise generator has the same seed and state on every worker), so
the update is the one a single worker would make and every replica stays
identical without a broadcast.
"""

import dataclasses
from typing import Callable, Iterable

import torch
from torch import nn
from torch.nn import functional as F

from tan_tune.training import clipping as clipping_lib

Gradients = dict[str, torch.Tensor]
# (images [b, K, C, H, W], labels [b], weights [b] or None): weight 0 marks a
# padding row of a capped sampler, which contributes nothing.
MicroBatch = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]


@dataclasses.dataclass(frozen=True)
class StepStats:
  """What one logical step saw.

  Attributes:
    examples: |B_t|, the realised logical batch size (padding not counted).
    loss_sum: sum over examples of their mean loss over K copies.
    clipped: how many examples had |g_i| > C (0 when not private).
  """

  examples: int
  loss_sum: float
  clipped: int


class StatsWindow:
  """Training loss, clip fraction and throughput of a simulation's steps
  since its last evaluation (a private run keeps none)."""

  def __init__(self):
    self.examples, self.loss_sum, self.clipped, self.seconds = 0, 0.0, 0, 0.0

  def add(self, stats: StepStats, seconds: float) -> None:
    self.examples += stats.examples
    self.loss_sum += stats.loss_sum
    self.clipped += stats.clipped
    self.seconds += seconds

  def summary(self) -> dict[str, float]:
    if not self.examples:
      return {}
    return {
        "train_loss": self.loss_sum / self.examples,
        "clipped_fraction": self.clipped / self.examples,
        "examples_per_second": self.examples / max(self.seconds, 1e-9),
    }


class DPSGD:
  """Applies DP-SGD steps to a model through a torch optimiser.

  The optimiser (SGD with the search's lr, momentum and dampening) only sees
  the privatised gradient, so any first-order optimiser stays private by
  post-processing.

  Attributes:
    model: the model whose parameters are trained.
    optimizer: the optimiser over `model`'s parameters.
    clip_norm: C; None trains without privacy (no clipping, no noise).
    noise_multiplier: sigma; the noise std is sigma C.
    expected_batch_size: B, the divisor of the step.
    generator: the source of the noise, on the parameters' device; seeded
      alike on every worker of a data-parallel run.
    all_reduce: sums a tensor in place across data-parallel workers
      (`torch.distributed.all_reduce`); None on a single worker.
    engine: computes each micro-batch's clipped sum (`clipping.py`).
  """

  def __init__(
      self,
      model: nn.Module,
      optimizer: torch.optim.Optimizer,
      clip_norm: float | None,
      noise_multiplier: float,
      expected_batch_size: int,
      generator: torch.Generator,
      all_reduce: Callable[[torch.Tensor], object] | None = None,
      clipping: str | clipping_lib.Engine = "vmap",
      jl_projections: int | None = None,
  ):
    """`clipping` is an engine, or the name of one (with r =
    `jl_projections` for 'jl'); 'auto' is resolved before, by
    `clipping.resolve`."""
    if clip_norm is None and noise_multiplier:
      raise ValueError("noise without clipping has no sensitivity to match")
    self.engine = (clipping if isinstance(clipping, clipping_lib.Engine)
                   else clipping_lib.named(clipping, jl_projections))
    uncovered = self.engine.uncovered(model)
    if uncovered:  # Their gradients would silently be left at zero.
      raise ValueError(f"{self.engine.name} clipping does not cover"
                       f" {uncovered}")
    self.model = model
    self.optimizer = optimizer
    self.clip_norm = clip_norm
    self.noise_multiplier = noise_multiplier
    self.expected_batch_size = expected_batch_size
    self.generator = generator
    self.all_reduce = all_reduce

  @property
  def clipping(self) -> str:
    """The engine's name, as reports and MLflow say it."""
    return self.engine.name

  def summed_gradient(
      self, micro_batches: Iterable[MicroBatch]
  ) -> tuple[Gradients, StepStats]:
    """sum_i w_i clip_C(g_i) over the logical batch, before noise.

    Args:
      micro_batches: (images [b, K, C, H, W], labels [b], weights [b] or
        None) that together form one logical batch; w_i = 1 without weights.
    """
    params = {
        name: p for name, p in self.model.named_parameters() if p.requires_grad
    }
    total = {name: torch.zeros_like(p) for name, p in params.items()}
    examples, loss_sum, clipped = 0, 0.0, 0
    step_seed = (self.engine.step_seed(self.generator)
                 if self.clip_norm is not None else None)
    for images, labels, weights in micro_batches:
      if weights is None:
        weights = images.new_ones(labels.shape[0])
      if self.clip_norm is None:
        losses = self._add_plain_gradient(params, images, labels, weights,
                                          total)
      else:
        result = self.engine.clipped_sum(self.model, images, labels,
                                         self.clip_norm, weights, step_seed)
        for name, g in result.gradients.items():
          total[name] += g
        losses, norms = result.losses, result.norms
      if self.clip_norm is not None:
        clipped += int(((norms > self.clip_norm) & (weights > 0)).sum())
      examples += int((weights > 0).sum())
      loss_sum += float((losses.detach() * weights).sum())
    return total, StepStats(examples, loss_sum, clipped)

  def _add_plain_gradient(
      self,
      params: Gradients,
      images: torch.Tensor,
      labels: torch.Tensor,
      weights: torch.Tensor,
      total: Gradients,
  ) -> torch.Tensor:
    """Non-private: adds sum_i w_i g_i by ordinary backprop, no per-sample
    work."""
    b, k = images.shape[:2]
    logits = self.model(images.flatten(end_dim=1))
    losses = F.cross_entropy(
        logits, labels.repeat_interleave(k), reduction="none"
    ).view(b, k).mean(dim=1)
    grads = torch.autograd.grad((losses * weights).sum(),
                                list(params.values()))
    for name, g in zip(params, grads):
      total[name] += g
    return losses

  def step(self, micro_batches: Iterable[MicroBatch],
           added: Gradients | None = None) -> StepStats:
    """One logical step: clipped sum, one noise draw, divide by B, update.

    `added` joins this worker's clipped sum before the all-reduce: clipped
    gradients that come from no input (an audit's gradient canaries).
    """
    total, stats = self.summed_gradient(micro_batches)
    for name, g in (added or {}).items():
      total[name] += g
    if self.all_reduce:
      total, stats = self._reduced(total, stats)
    std = (self.noise_multiplier or 0.0) * (self.clip_norm or 0.0)
    for name, p in self.model.named_parameters():
      if not p.requires_grad:
        continue
      gradient = total[name]
      if std:
        gradient = gradient + std * torch.randn(
            p.shape, generator=self.generator, device=p.device, dtype=p.dtype
        )
      p.grad = gradient / self.expected_batch_size
    self.optimizer.step()
    self.optimizer.zero_grad(set_to_none=True)
    return stats

  def _reduced(
      self, total: Gradients, stats: StepStats
  ) -> tuple[Gradients, StepStats]:
    """Sums the workers' clipped sums and counts; one collective for each."""
    flat = torch.cat([g.flatten() for g in total.values()])
    self.all_reduce(flat)
    reduced = {}
    offset = 0
    for name, g in total.items():
      reduced[name] = flat[offset:offset + g.numel()].view_as(g)
      offset += g.numel()
    counts = torch.tensor(
        [stats.examples, stats.loss_sum, stats.clipped],
        dtype=torch.float64, device=flat.device,
    )
    self.all_reduce(counts)
    examples, loss_sum, clipped = counts.tolist()
    return reduced, StepStats(int(examples), loss_sum, int(clipped))
