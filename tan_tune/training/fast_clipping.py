"""Exact per-example clipping with AugMult, without per-sample gradients.

The loss of a micro-batch of b examples with K augmented copies each is
L = sum_i (1/K) sum_j l(x_ij), so the per-example gradient g_i is that of the
K-averaged loss, the quantity DP-SGD with AugMult clips. One forward over the
b K copies records every covered layer's input; one backward, which computes
no weight gradient, hands each layer the gradient of its output, from which
the layer (`layer_clipping`, `timm_clipping`) takes |g_i|^2 of its own parameters by the ghost
identity or by instantiating its per-example gradient, whichever costs less;
then |g_i| = sqrt(sum over layers), c_i = min(1, C / |g_i|), and each layer
gives sum_i c_i g_i from what it kept (book-keeping). No step materialises
per-sample gradients of the whole model (ghost clipping, Li et al. ICLR 2022;
book-keeping, Bu et al. ICML 2023). tests/training/test_fast_clipping.py checks the
sums against per-example autograd. A GroupNorm + linear head on fixed
features (the ScatterNet classifier's) takes its closed form instead
(`norm_head_clipping`): the same sums, without the recording.
"""

import dataclasses
import sys

import torch
from torch import nn
from torch.nn import functional as F

from tan_tune.training import norm_head_clipping
from tan_tune.training.layer_clipping import LAYER_CLIPPERS
from tan_tune.training.layer_clipping import LayerClip

Gradients = dict[str, torch.Tensor]


def clip_class(module: nn.Module) -> type[LayerClip] | None:
  """The class that clips `module`'s own parameters; None if none does.
  Each covers exact module types (a subclass may change the forward), so at
  most one of the registered classes (`layer_clipping.LAYER_CLIPPERS`) does."""
  if "timm" in sys.modules:  # Only then can a module be one of timm's.
    from tan_tune.training import timm_clipping  # pylint: disable=g-import-not-at-top,unused-import
  return next((c for c in LAYER_CLIPPERS if c.covers(module)), None)


@dataclasses.dataclass(frozen=True)
class ClippedSum:
  """What one micro-batch gives.

  Attributes:
    gradients: sum_i c_i g_i by parameter name.
    norms: |g_i| for each example, all parameters together (float32 at
      least).
    losses: each example's mean loss over its K copies.
  """

  gradients: Gradients
  norms: torch.Tensor
  losses: torch.Tensor


def uncovered_parameters(model: nn.Module) -> list[str]:
  """Trainable parameters that no `layer_clipping` class owns; empty: covered."""
  covered = set()
  for module_name, module in model.named_modules():
    kind = clip_class(module)
    for name in kind.owned(module) if kind else ():
      covered.add(f"{module_name}.{name}" if module_name else name)
  return [name for name, p in model.named_parameters()
          if p.requires_grad and name not in covered]


class _Recorder:
  """Watches every covered layer through one forward and one backward."""

  def __init__(self, model: nn.Module, examples: int):
    self.layers: list[LayerClip] = []
    for name, module in model.named_modules():
      kind = clip_class(module)
      layer = kind(name, module, examples) if kind else None
      if layer is not None and layer.trained:
        self.layers.append(layer)
    self.leaves: list[torch.Tensor] = []
    self._watched: set[str] = set()
    self._handles = []

  def __enter__(self) -> "_Recorder":
    for layer in self.layers:
      self._handles.append(layer.watch(self._watcher(layer)))
    return self

  def __exit__(self, *exc) -> None:
    for handle in self._handles:
      handle.remove()

  def _watcher(self, layer: LayerClip):
    def watch(tensor: torch.Tensor) -> torch.Tensor:
      if layer.name in self._watched:
        raise ValueError(
            f"layer {layer.name!r} runs twice in one forward pass; fast"
            " clipping keeps one input per layer: use clipping 'vmap'")
      self._watched.add(layer.name)
      if not tensor.requires_grad:
        # Nothing before this layer needs a gradient (parameters are frozen
        # for the pass): the backward can stop here, at a new leaf.
        leaf = tensor.detach().requires_grad_(True)
        self.leaves.append(leaf)
        tensor = leaf.clone()  # In-place activations may not touch a leaf.

      def arrived(grad):
        with torch.no_grad():
          layer.take_gradient(grad.detach())
      # A tensor hook sees the gradient of the tensor as the layer made it,
      # even when a later in-place activation overwrites that tensor; it runs
      # inside the backward, so a layer frees what it no longer needs early.
      tensor.register_hook(arrived)
      return tensor
    return watch


def clipped_sum(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    clip_norm: float,
    weights: torch.Tensor | None = None,
) -> ClippedSum:
  """sum_i w_i min(1, C / |g_i|) g_i over one micro-batch, book-keeping style.

  Args:
    model: a classifier whose trainable parameters are all covered (see
      `uncovered_parameters`), with no cross-sample layers, each layer run
      once per forward pass.
    images: [b, K, C, H, W], K augmented copies of each of b examples.
    labels: [b].
    clip_norm: C.
    weights: [b], w_i (0 for padding rows); None is all ones.
  """
  b, k = images.shape[:2]
  named = {n: p for n, p in model.named_parameters() if p.requires_grad}
  if b == 0:  # An empty Poisson batch: the step is noise alone.
    empty = images.new_zeros(0)
    return ClippedSum({n: torch.zeros_like(p) for n, p in named.items()},
                      empty, empty)
  if norm_head_clipping.covers(model, images):
    return ClippedSum(*norm_head_clipping.clipped_sum(
        model, images, labels, clip_norm, weights))
  recorder = _Recorder(model, b)
  # Weight gradients are not wanted from autograd, only output gradients:
  # parameters are frozen for the pass and the first layers' outputs become
  # the leaves that the backward runs to.
  try:
    for p in named.values():
      p.requires_grad_(False)
    with recorder:
      logits = model(images.flatten(end_dim=1))
    losses = F.cross_entropy(
        logits, labels.repeat_interleave(k), reduction="none"
    ).view(b, k).mean(dim=1)
    torch.autograd.grad(losses.sum(), recorder.leaves, allow_unused=True)
  finally:
    for p in named.values():
      p.requires_grad_(True)

  # A layer the loss does not reach has no gradient: g_i = 0 there.
  layers = [layer for layer in recorder.layers if layer.squares is not None]
  norm_dtype = torch.promote_types(logits.dtype, torch.float32)
  for layer in layers:
    norm_dtype = torch.promote_types(norm_dtype, layer.squares.dtype)
  squares = torch.zeros(b, dtype=norm_dtype, device=images.device)
  for layer in layers:
    squares += layer.squares
  norms = squares.sqrt()
  factors = (clip_norm / norms.clamp(min=clip_norm)).detach()
  if weights is not None:
    factors = factors * weights.to(factors.dtype)
  gradients = {}
  for layer in layers:
    gradients.update(layer.weighted_sums(factors))
  return ClippedSum(gradients, norms, losses.detach())
