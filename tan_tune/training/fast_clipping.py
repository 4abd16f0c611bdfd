"""Exact per-example clipping with AugMult, without per-sample gradients.

For a layer s = W a + beta seen by example i through its K augmented copies
and T positions (a conv's a is one patch of p = C_in k_h k_w / groups values),
the loss L = sum_i (1/K) sum_j l(x_ij) gives output gradients b that carry
the 1/K, and the per-example gradient of the K-averaged loss is

    g_i(W) = sum_{j,t} b_ijt a_ijt^T,        g_i(beta) = sum_{j,t} b_ijt.

One forward over the b K copies keeps every layer's input a, one backward
gives every layer's output gradient b (and no weight gradient), then per layer
with n = K T rows per example:

- ghost:       |g_i(W)|^2 = < A_i A_i^T, B_i B_i^T >   (n x n Grams);
- instantiate: g_i(W) itself, the K-summed per-example weight gradient
  (a conv's is the ordinary weight gradient with examples folded into groups).

Ghost costs 2 n^2 (p + d) FLOPs and n^2 memory, instantiation 2 n p d and p d:
ghost is chosen when 2 n^2 <= p d (fastDP's rule, here at n = K T, since the
cross-copy terms are part of the norm). Norm layers' affine parameters and
biases are always instantiated (they are small). The clipped sum
sum_i c_i g_i comes from the same stored tensors (book-keeping): instantiated
layers sum their g_i weighted by c_i; ghost layers take the ordinary weight
gradient with each example's output gradients scaled by c_i. The maths and
its checks: ../shared/notes/fast-clipping.md.
"""

import dataclasses

import torch
from torch import nn
from torch.nn import functional as F

Gradients = dict[str, torch.Tensor]

# Exact types: a subclass may change the forward (timm's weight-standardised
# ScaledStdConv2d is a Conv2d whose gradients these formulas do not give).
SUPPORTED = (nn.Linear, nn.Conv2d, nn.GroupNorm, nn.LayerNorm)


def _supported(module: nn.Module) -> bool:
  return type(module) in SUPPORTED


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
  """Trainable parameters that no supported layer owns; empty: covered."""
  covered = set()
  for module_name, module in model.named_modules():
    if _supported(module):
      for name, _ in module.named_parameters(recurse=False):
        covered.add(f"{module_name}.{name}" if module_name else name)
  return [name for name, p in model.named_parameters()
          if p.requires_grad and name not in covered]


def use_ghost(module: nn.Module, rows: int) -> bool:
  """The cost rule: ghost norm when 2 n^2 <= p d, n = K T rows per example."""
  if isinstance(module, nn.Linear):
    p, d = module.in_features, module.out_features
  elif isinstance(module, nn.Conv2d):
    kh, kw = module.kernel_size
    p = module.in_channels // module.groups * kh * kw
    d = module.out_channels
  else:
    return False
  return 2 * rows * rows <= p * d


class _Recorder:
  """Keeps each supported layer's input and, after backward, its output grad."""

  def __init__(self, model: nn.Module):
    self.layers = [(name, m) for name, m in model.named_modules()
                   if _supported(m)
                   and any(p.requires_grad for p in m.parameters(recurse=False))]
    self.inputs: dict[str, torch.Tensor] = {}
    self.output_grads: dict[str, torch.Tensor] = {}
    self.leaves: list[torch.Tensor] = []
    self._handles = []

  def __enter__(self) -> "_Recorder":
    for name, module in self.layers:
      self._handles.append(module.register_forward_hook(self._hook(name)))
    return self

  def __exit__(self, *exc) -> None:
    for handle in self._handles:
      handle.remove()

  def _hook(self, name: str):
    def forward_hook(module, inputs, output):
      if name in self.inputs:
        raise ValueError(
            f"layer {name!r} runs twice in one forward pass; fast clipping"
            " keeps one input per layer: use clipping 'vmap'")
      self.inputs[name] = inputs[0].detach()
      if not output.requires_grad:
        # Nothing before this layer needs a gradient (parameters are frozen
        # for the pass): the backward can stop at its output, a new leaf.
        leaf = output.detach().requires_grad_(True)
        self.leaves.append(leaf)
        output = leaf.clone()  # In-place activations may not touch a leaf.

      def keep(grad):
        self.output_grads[name] = grad.detach()
      # A tensor hook sees the gradient of the output as the layer made it,
      # even when a later in-place activation overwrites that tensor.
      output.register_hook(keep)
      return output
    return forward_hook


def clipped_sum(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    clip_norm: float,
) -> ClippedSum:
  """sum_i min(1, C / |g_i|) g_i over one micro-batch, book-keeping style.

  Args:
    model: a classifier whose trainable parameters all belong to `SUPPORTED`
      layers (see `uncovered_parameters`) and with no cross-sample layers.
    images: [b, K, C, H, W], K augmented copies of each of b examples.
    labels: [b].
    clip_norm: C.
  """
  b, k = images.shape[:2]
  named = {n: p for n, p in model.named_parameters() if p.requires_grad}
  if b == 0:  # An empty Poisson batch: the step is noise alone.
    empty = images.new_zeros(0)
    return ClippedSum({n: torch.zeros_like(p) for n, p in named.items()},
                      empty, empty)
  params = list(named.values())
  recorder = _Recorder(model)
  # Weight gradients are not wanted from autograd, only output gradients:
  # parameters are frozen for the pass and the first layers' outputs become
  # the leaves that the backward runs to.
  copies = images.flatten(end_dim=1)
  try:
    for p in params:
      p.requires_grad_(False)
    with recorder:
      logits = model(copies)
    losses = F.cross_entropy(
        logits, labels.repeat_interleave(k), reduction="none"
    ).view(b, k).mean(dim=1)
    torch.autograd.grad(losses.sum(), recorder.leaves, allow_unused=True)
  finally:
    for p in params:
      p.requires_grad_(True)

  # A layer the loss does not reach has no output gradient: g_i = 0 there.
  layers = [_Layer(name, module, recorder.inputs[name],
                   recorder.output_grads[name], b)
            for name, module in recorder.layers
            if name in recorder.output_grads]
  # At least float32 under mixed precision; float64 models keep float64.
  norm_dtype = torch.promote_types(logits.dtype, torch.float32)
  squares = torch.zeros(b, dtype=norm_dtype, device=images.device)
  for layer in layers:
    squares += layer.squared_norms(norm_dtype)
  norms = squares.sqrt()
  factors = (clip_norm / norms.clamp(min=clip_norm)).detach()
  gradients = {}
  for layer in layers:
    gradients.update(layer.weighted_sums(factors))
  return ClippedSum(gradients, norms, losses.detach())


class _Layer:
  """One layer's stored input and output gradient, grouped by example."""

  def __init__(self, name: str, module: nn.Module, inputs: torch.Tensor,
               output_grads: torch.Tensor, examples: int):
    self.name = name
    self.module = module
    self.inputs = inputs
    self.output_grads = output_grads
    self.examples = examples
    self._instantiated: Gradients | None = None

  def _key(self, attribute: str) -> str:
    """The model's name for this layer's parameter 'weight' or 'bias'."""
    return f"{self.name}.{attribute}" if self.name else attribute

  def _trains(self, attribute: str) -> bool:
    parameter = getattr(self.module, attribute)
    return parameter is not None and parameter.requires_grad

  def _rows(self) -> tuple[torch.Tensor, torch.Tensor]:
    """A [b, n, p] and B [b, n, d]: each example's n = K T rows."""
    b = self.examples
    if isinstance(self.module, nn.Conv2d):
      m = self.module
      patches = F.unfold(self.inputs, m.kernel_size, m.dilation, m.padding,
                         m.stride)  # [bK, p, T]
      a = patches.transpose(1, 2).reshape(b, -1, patches.shape[1])
      g = self.output_grads.flatten(start_dim=2).transpose(1, 2)
      return a, g.reshape(b, -1, g.shape[-1])
    a = self.inputs.reshape(b, -1, self.inputs.shape[-1])
    return a, self.output_grads.reshape(b, -1, self.output_grads.shape[-1])

  def _ghost(self) -> bool:
    """Whether the cost rule picks the ghost norm, with n = K T rows."""
    g = self.output_grads
    if not isinstance(self.module, (nn.Linear, nn.Conv2d)):
      return False  # Norm layers' few parameters are always instantiated.
    if isinstance(self.module, nn.Conv2d):
      if self.module.groups > 1:
        return False  # Ghost Grams over whole patches would mix the groups.
      positions = g.shape[2] * g.shape[3]
    else:
      positions = g[0].numel() // g.shape[-1]
    return use_ghost(self.module, g.shape[0] // self.examples * positions)

  def squared_norms(self, dtype: torch.dtype) -> torch.Tensor:
    """|g_i|^2 of this layer's parameters, for each example, in `dtype`."""
    if self._ghost():
      a, g = (t.to(dtype) for t in self._rows())
      gram_a = torch.bmm(a, a.transpose(1, 2))
      gram_g = torch.bmm(g, g.transpose(1, 2))
      total = (gram_a * gram_g).sum(dim=(1, 2))
      if self._trains("bias"):
        total = total + g.sum(dim=1).pow(2).sum(dim=1)
      return total
    self._instantiated = self._per_example()
    return sum(grad.to(dtype).flatten(start_dim=1).pow(2).sum(dim=1)
               for grad in self._instantiated.values())

  def weighted_sums(self, factors: torch.Tensor) -> Gradients:
    """sum_i c_i g_i for this layer's parameters."""
    if self._instantiated is not None:
      return {name: torch.einsum("b,b...->...", factors.to(g.dtype), g)
              for name, g in self._instantiated.items()}
    # Ghost: the ordinary weight gradient of row-scaled output gradients.
    k = self.output_grads.shape[0] // self.examples
    scale = factors.repeat_interleave(k).to(self.output_grads.dtype)
    scaled = self.output_grads * scale.view(-1, *[1] * (
        self.output_grads.dim() - 1))
    m = self.module
    sums = {}
    if isinstance(m, nn.Conv2d):
      sums[self._key("weight")] = torch.nn.grad.conv2d_weight(
          self.inputs, m.weight.shape, scaled, m.stride, m.padding,
          m.dilation, m.groups)
      reduce_dims = (0, 2, 3)
    else:
      sums[self._key("weight")] = torch.einsum(
          "nd,np->dp", scaled.reshape(-1, scaled.shape[-1]),
          self.inputs.reshape(-1, self.inputs.shape[-1]))
      reduce_dims = tuple(range(scaled.dim() - 1))
    if self._trains("bias"):
      sums[self._key("bias")] = scaled.sum(dim=reduce_dims)
    return sums

  def _per_example(self) -> Gradients:
    """g_i of every parameter of this layer, [b, *shape], K copies summed."""
    m, b = self.module, self.examples
    g = self.output_grads
    k = g.shape[0] // b
    out: Gradients = {}
    if isinstance(m, nn.Conv2d):
      # Examples folded into groups: the batch axis of the conv is K, so the
      # weight gradient sums the copies, per example.
      x = self.inputs
      x = x.view(b, k, *x.shape[1:]).transpose(0, 1).reshape(
          k, b * x.shape[1], *x.shape[2:])
      gy = g.view(b, k, *g.shape[1:]).transpose(0, 1).reshape(
          k, b * g.shape[1], *g.shape[2:])
      weight = torch.nn.grad.conv2d_weight(
          x, (b * m.out_channels, *m.weight.shape[1:]), gy, m.stride,
          m.padding, m.dilation, b * m.groups)
      out[self._key("weight")] = weight.view(b, *m.weight.shape)
      if self._trains("bias"):
        out[self._key("bias")] = g.view(b, k, g.shape[1], -1).sum(
            dim=(1, 3))
      return out
    if isinstance(m, nn.Linear):
      a, gy = self._rows()
      out[self._key("weight")] = torch.einsum("bnd,bnp->bdp", gy, a)
      if self._trains("bias"):
        out[self._key("bias")] = gy.sum(dim=1)
      return out
    # Norm layers: out = xhat * gamma + beta, per channel (GroupNorm) or per
    # normalised element (LayerNorm).
    if isinstance(m, nn.GroupNorm):
      xhat = F.group_norm(self.inputs, m.num_groups, eps=m.eps)

      def per_example(t):  # Sums copies and positions, per channel.
        return t.reshape(b, k, t.shape[1], -1).sum(dim=(1, 3))
    else:
      xhat = F.layer_norm(self.inputs, m.normalized_shape, eps=m.eps)

      def per_example(t):  # Sums copies and tokens, per normalised element.
        return t.reshape(b, -1, *m.normalized_shape).sum(dim=1)
    if self._trains("weight"):
      out[self._key("weight")] = per_example(g * xhat)
    if self._trains("bias"):
      out[self._key("bias")] = per_example(g)
    return out
