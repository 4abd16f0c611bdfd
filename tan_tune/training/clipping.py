"""One interface for every way of computing DP-SGD's clipped sum.

For a micro-batch of b examples (each with its K augmented copies) and
weights w_i (0 for a capped sampler's padding rows), an engine returns

    sum_i w_i c_i g_i,   c_i = min(1, C / |g_i|),

with g_i the gradient of example i's mean loss over its copies, beside each
|g_i| and each loss (`ClippedSum`). The engines:

* 'fast': the sums from one forward and one backward, without per-sample
  gradients (`fast_clipping`; the model's layers must be covered);
* 'vmap': per-sample gradients by `torch.func` (any model; the reference);
* 'jl': |g_i| estimated from r random projections (`jl_clipping`; any model).

Each engine says what it promises the accountant (`bound`): C for the exact
engines, the random C Z_r for 'jl' (`privacy/clipping_bound.py`). A run's
sampling scheme carries that bound, so the accounting travels with the
engine and a run refuses an engine whose bound is not the one accounted.

Engines register themselves by name (`register`); `resolve` turns a config's
'auto' into one, in one place.
"""

import dataclasses
import logging
from typing import ClassVar

import torch
from torch import func
from torch import nn
from torch.nn import functional as F

from tan_tune.errors import ConfigError
from tan_tune.privacy import clipping_bound
from tan_tune.privacy.clipping_bound import ClippingBound
from tan_tune.training import fast_clipping
from tan_tune.training import jl_clipping
from tan_tune.training.fast_clipping import ClippedSum
from tan_tune.training.fast_clipping import Gradients

_LOG = logging.getLogger(__name__)
ENGINES: dict[str, type["Engine"]] = {}


def register(engine: type["Engine"]) -> type["Engine"]:
  """Class decorator: makes an engine available by its `name`."""
  ENGINES[engine.name] = engine
  return engine


@dataclasses.dataclass(frozen=True)
class Engine:
  """How one micro-batch's clipped sum is computed.

  Attributes:
    projections: r, for an engine that estimates norms; None otherwise.
  """

  # Its name in configs; an estimating engine's bound on an example is
  # random, so it has an accountant of its own.
  name: ClassVar[str]
  estimated: ClassVar[bool] = False
  projections: int | None = None

  def __post_init__(self):
    if self.estimated != (self.projections is not None) or (
        self.projections is not None and self.projections < 1):
      raise ValueError(f"{self.name} clipping: projections r >= 1 with an"
                       " estimating engine, and only there")

  @property
  def bound(self) -> ClippingBound:
    """What this engine promises the accountant about one example."""
    return clipping_bound.EXACT

  def uncovered(self, model: nn.Module) -> list[str]:
    """Trainable parameters the engine cannot clip; empty: all covered."""
    del model
    return []

  def step_seed(self, generator: torch.Generator) -> int | None:
    """Drawn once per logical step from the run's secret stream, before its
    micro-batches, for an engine that randomises (none of the exact ones:
    they draw nothing, so the stream is the same whichever computes)."""
    del generator
    return None

  def clipped_sum(self, model: nn.Module, images: torch.Tensor,
                  labels: torch.Tensor, clip_norm: float,
                  weights: torch.Tensor, step_seed: int | None) -> ClippedSum:
    """sum_i w_i c_i g_i over one micro-batch, each |g_i| and each loss.

    Args:
      model: a classifier with no cross-sample layers (no BatchNorm).
      images: [b, K, C, H, W].
      labels: [b].
      clip_norm: C.
      weights: [b], 0 for padding rows.
      step_seed: what `step_seed` drew for this logical step.
    """
    raise NotImplementedError


def per_sample_gradients(
    model: nn.Module, images: torch.Tensor, labels: torch.Tensor
) -> tuple[Gradients, torch.Tensor]:
  """g_i for each example: the gradient of its mean loss over K copies.

  Args:
    model: a classifier with no cross-sample layers (no BatchNorm).
    images: [b, K, C, H, W], K augmented copies of each of b examples.
    labels: [b].

  Returns:
    Per-sample gradients by parameter name, each [b, *param.shape], and the
    per-sample losses [b].
  """
  params = {
      name: p.detach() for name, p in model.named_parameters() if p.requires_grad
  }
  buffers = dict(model.named_buffers())

  def sample_loss(params: Gradients, copies: torch.Tensor, label: torch.Tensor):
    logits = func.functional_call(model, (params, buffers), (copies,))
    loss = F.cross_entropy(logits, label.expand(copies.shape[0]))
    return loss, loss

  grads, losses = func.vmap(
      func.grad(sample_loss, has_aux=True),
      in_dims=(None, 0, 0),
      randomness="different",  # Dropout draws anew for each example.
  )(params, images, labels)
  return grads, losses


def clip_factors(
    grads: Gradients, clip_norm: float
) -> tuple[torch.Tensor, torch.Tensor]:
  """min(1, C / |g_i|) for each example, and the norms |g_i|.

  |g_i| is the norm of the whole per-sample gradient, all parameters flattened
  together (flat clipping). Written as C / max(|g_i|, C) so a zero gradient
  gets factor 1 and a large one ends at norm C exactly.
  """
  squares = [g.flatten(start_dim=1).pow(2).sum(dim=1) for g in grads.values()]
  norms = torch.stack(squares).sum(dim=0).sqrt()
  return clip_norm / norms.clamp(min=clip_norm), norms


@register
@dataclasses.dataclass(frozen=True)
class Fast(Engine):
  """The same sums without per-sample gradients, for covered layers."""

  name: ClassVar[str] = "fast"

  def uncovered(self, model):
    return fast_clipping.uncovered_parameters(model)

  def clipped_sum(self, model, images, labels, clip_norm, weights, step_seed):
    return fast_clipping.clipped_sum(model, images, labels, clip_norm,
                                     weights)


@register
@dataclasses.dataclass(frozen=True)
class Vmap(Engine):
  """Per-sample gradients, clipped and summed: any model, the most memory."""

  name: ClassVar[str] = "vmap"

  def clipped_sum(self, model, images, labels, clip_norm, weights, step_seed):
    grads, losses = per_sample_gradients(model, images, labels)
    factors, norms = clip_factors(grads, clip_norm)
    factors = factors * weights.to(factors.dtype)
    return ClippedSum(
        {name: torch.einsum("b,b...->...", factors, g)
         for name, g in grads.items()}, norms, losses)


@register
@dataclasses.dataclass(frozen=True)
class JL(Engine):
  """Norms estimated from r projections: any model, its own accountant."""

  name: ClassVar[str] = "jl"
  estimated: ClassVar[bool] = True

  @property
  def bound(self):
    return clipping_bound.JlBound(self.projections)

  def step_seed(self, generator):
    # One set of probes for the whole logical step, from the secret stream.
    return int(torch.randint(2**62, (1,), generator=generator,
                             device=generator.device))

  def clipped_sum(self, model, images, labels, clip_norm, weights, step_seed):
    return jl_clipping.jl_clipped_sum(model, images, labels, clip_norm,
                                      self.projections, step_seed, weights)


# What a config may give instead of an engine's name: fast clipping where
# it covers the model, else per-sample gradients (`resolve`).
AUTO = "auto"
# The names a config may give, 'auto' first; exact engines before estimating.
NAMES = (AUTO, *(name for name, e in ENGINES.items() if not e.estimated),
         *(name for name, e in ENGINES.items() if e.estimated))


def estimates(wanted: str) -> bool:
  """Whether the engine a config's `clipping` names estimates norms, and so
  takes r projections ('auto' never does)."""
  engine = ENGINES.get(wanted)
  return engine is not None and engine.estimated


def named(name: str, projections: int | None = None) -> Engine:
  """The engine registered as `name`, with r = `projections` if it
  estimates.

  Raises:
    ValueError: no such engine, or projections where they do not belong.
  """
  if name not in ENGINES:
    raise ValueError(f"clipping {name!r}: one of {list(ENGINES)}")
  return ENGINES[name](projections=projections)


def resolve(wanted: str, model: nn.Module,
            projections: int | None = None) -> Engine:
  """The engine a config's `clipping` names for `model`; 'auto' is 'fast'
  when fast clipping covers every trainable parameter, else 'vmap' (said
  once in the log).

  Raises:
    ConfigError: an unknown name, or 'fast' for a model it does not cover.
  """
  if wanted not in NAMES:
    raise ConfigError("clipping", wanted, f"one of {list(NAMES)}")
  if wanted == AUTO:
    uncovered = Fast().uncovered(model)
    if not uncovered:
      return Fast()
    _LOG.info("clipping: 'vmap' (per-sample gradients): fast clipping does"
              " not cover %s", ", ".join(uncovered[:3]))
    return Vmap()
  engine = named(wanted, projections)
  uncovered = engine.uncovered(model)
  if uncovered:
    raise ConfigError(
        "clipping", wanted,
        f"'vmap' or 'auto' for this model: {wanted} clipping does not cover"
        f" {', '.join(uncovered[:3])}{' ...' if len(uncovered) > 3 else ''}")
  return engine


def fallback(wanted: str, model: nn.Module,
             projections: int | None = None) -> list[str]:
  """What `resolve` will make of a config's `clipping` for `model`, said
  before any run: the parameters 'auto' leaves to per-sample gradients
  (empty when fast clipping covers them all, or another engine is named).

  Raises:
    ConfigError: as `resolve`, for an engine that does not cover `model`.
  """
  if wanted == AUTO:
    return Fast().uncovered(model)
  resolve(wanted, model, projections)
  return []
