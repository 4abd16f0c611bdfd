"""One layer's per-example gradient norms and clipped sums, from its tensors.

Each class here (and in `timm_clipping`) owns some parameters of one module and sees, for a micro-batch
of b examples with K augmented copies each, the layer's input (recorded in the
forward pass) and the gradient of the loss L = sum_i (1/K) sum_j l(x_ij) with
respect to one of its tensors (the output, or a ViT's embedded tokens). From
those it gives |g_i|^2 of its parameters for each example i, then
sum_i c_i g_i for the clip factors c_i. `fast_clipping` drives them; the
ghost norm is Li et al.'s (ICLR 2022), the per-layer choice and book-keeping
Bu et al.'s (ICML 2023); tests/training/test_layer_clipping.py checks every layer
against per-example autograd.

For a layer s = W a + beta with n = K T rows per example (T positions; a
conv's a is one patch of p = C_in k_h k_w / groups values, d outputs):

- ghost:       |g_i(W)|^2 = < A_i A_i^T, B_i B_i^T >, n x n Grams,
               2 n^2 (p + d) FLOPs per example;
- instantiate: g_i(W) = sum_{j,t} b_ijt a_ijt^T itself, 2 n p d FLOPs.

The cheaper branch is taken: by FLOPs where one is 8x cheaper (`use_ghost`),
else by timing both once per layer shape (`_MEASURED`). Instantiated
per-example gradients are kept for the clipped sum (a weighted sum, the
book-keeping trick) when they take no more memory than the layer's input and
output gradient, which are then freed; otherwise, and for ghost layers, the
clipped sum is the ordinary weight gradient of output gradients scaled by c_i.
"""

import sys
import time

import torch
from torch import nn
from torch.nn import functional as F

Gradients = dict[str, torch.Tensor]


def timm_types(*names: str) -> tuple[type, ...]:
  """timm's layer classes of these names in `timm.layers`, or () while timm
  is not loaded: no module can be of a timm type before, and importing timm
  costs seconds that a run of torch layers only saves."""
  if "timm" not in sys.modules:
    return ()
  from timm import layers  # pylint: disable=g-import-not-at-top
  return tuple(getattr(layers, name) for name in names)


# Exact types: a subclass may change the forward. timm's norm layers compute
# what the torch ones do (in lower precision under autocast, still the maths).
def _weight_layers() -> tuple[type, ...]:
  return (nn.Linear, nn.Conv2d, *timm_types("Linear"))


def _norms() -> tuple[type, ...]:
  return (nn.GroupNorm, nn.LayerNorm,
          *timm_types("GroupNorm", "GroupNorm1", "LayerNorm"))


# FLOP ratios beyond which the cheaper branch is taken without measuring.
CLEAR_CUT = 8.0


def use_ghost(module: nn.Module, rows: int) -> bool | None:
  """The FLOP rule, n = K T rows: ghost costs 2 n^2 (p + d) per example,
  instantiation 2 n p d. True or False when one is CLEAR_CUT times cheaper;
  None when it is closer than that, and the layer measures both."""
  if isinstance(module, nn.Linear):
    p, d = module.in_features, module.out_features
  elif isinstance(module, nn.Conv2d):
    kh, kw = module.kernel_size
    p = module.in_channels // module.groups * kh * kw
    d = module.out_channels
  else:
    return False
  ratio = rows * (p + d) / (p * d)
  if ratio * CLEAR_CUT < 1 or ratio > CLEAR_CUT:
    return ratio < 1
  return None


# Measured ghost-or-instantiate choices by layer and shape of one example's
# tensors, kept for the process
# (as cuDNN's benchmark mode keeps its algorithms): FLOPs misjudge kernels,
# the grouped convolution that instantiates a conv's per-example gradients
# runs up to 10x below the batched one's speed on CPU.
_MEASURED: dict[tuple, bool] = {}


def _seconds(run) -> tuple[float, object]:
  """Wall time of run() and its result, waiting for the GPU if there is one."""
  synchronise = (torch.cuda.synchronize if torch.cuda.is_initialized()
                 else lambda: None)
  synchronise()
  start = time.perf_counter()
  result = run()
  synchronise()
  return time.perf_counter() - start, result


def norm_dtype(*tensors: torch.Tensor) -> torch.dtype:
  """float32 at least (norms under mixed precision), float64 stays."""
  dtype = torch.float32
  for t in tensors:
    dtype = torch.promote_types(dtype, t.dtype)
  return dtype


def squares_of(grads: Gradients) -> torch.Tensor:
  """sum over parameters of |g_i|^2, per example, from [b, ...] tensors."""
  return sum(g.flatten(start_dim=1).pow(2).sum(dim=1) for g in grads.values())


# Every layer clipper, in registration order (`layer_clipper`).
LAYER_CLIPPERS: list[type["LayerClip"]] = []


def layer_clipper(cls: type["LayerClip"]) -> type["LayerClip"]:
  """Class decorator: fast clipping covers the modules `cls.covers`."""
  LAYER_CLIPPERS.append(cls)
  return cls


class LayerClip:
  """The parameters `ATTRIBUTES` of one module, as the model names them.

  Subclasses set `squares` in `take_gradient` (called inside the backward
  pass, so that what is not needed later is freed as autograd goes) and give
  the clipped sums in `weighted_sums`.
  """

  ATTRIBUTES: tuple[str, ...] = ("weight", "bias")

  def __init__(self, name: str, module: nn.Module, examples: int):
    self.name = name
    self.module = module
    self.examples = examples
    # Read now: parameters are frozen while the pass runs.
    self.trained = tuple(a for a in self.owned(module)
                         if getattr(module, a).requires_grad)
    self.inputs: torch.Tensor | None = None
    self.grad: torch.Tensor | None = None
    self.squares: torch.Tensor | None = None
    self._per_example: Gradients | None = None

  @classmethod
  def covers(cls, module: nn.Module) -> bool:
    """Whether this class clips `module`'s own parameters."""
    raise NotImplementedError

  @classmethod
  def owned(cls, module: nn.Module) -> list[str]:
    return [a for a in cls.ATTRIBUTES
            if isinstance(getattr(module, a, None), nn.Parameter)]

  def key(self, attribute: str) -> str:
    """The model's name for this module's parameter `attribute`."""
    return f"{self.name}.{attribute}" if self.name else attribute

  def watch(self, callback) -> torch.utils.hooks.RemovableHandle:
    """Keeps the module's input and hands its output to `callback`, which
    returns the tensor the forward pass goes on with."""
    def hook(module, inputs, output):
      self.inputs = inputs[0].detach()
      return callback(output)
    return self.module.register_forward_hook(hook)

  def take_gradient(self, grad: torch.Tensor) -> None:
    """Sets `squares`, |g_i|^2 per example, from the watched tensor's grad."""
    raise NotImplementedError

  def weighted_sums(self, factors: torch.Tensor) -> Gradients:
    """sum_i c_i g_i of the trained parameters; frees what the layer kept."""
    return {self.key(a): s.to(getattr(self.module, a).dtype)
            for a, s in self._sums(factors).items() if a in self.trained}

  def _sums(self, factors: torch.Tensor) -> Gradients:
    kept, self._per_example = self._per_example, None
    return {a: torch.einsum("b,b...->...", factors.to(g.dtype), g)
            for a, g in kept.items()}

  def _keep(self, per_example: Gradients) -> None:
    """Keeps per-example gradients and frees the input and gradient."""
    self._per_example = per_example
    self.inputs = self.grad = None


@layer_clipper
class WeightLayer(LayerClip):
  """nn.Linear (2-D or token inputs) and nn.Conv2d (any stride, padding,
  dilation, groups): ghost or instantiated by `use_ghost`."""

  @classmethod
  def covers(cls, module: nn.Module) -> bool:
    return type(module) in _weight_layers()

  def take_gradient(self, grad: torch.Tensor) -> None:
    dtype = norm_dtype(grad, self.inputs)
    self.grad, self.inputs = grad.to(dtype), self.inputs.to(dtype)
    if self._ghost():
      self.squares = self._ghost_squares()
      return
    per_example = self._instantiate()
    self.squares = self._instantiated_squares(per_example)
    if self._small(per_example):
      self._keep(per_example)  # Book-keeping: the sum is a weighting.

  def _small(self, per_example: Gradients) -> bool:
    """Whether per-example gradients take no more memory than the tensors
    they replace, the input and the gradient."""
    size = sum(g.numel() for g in per_example.values())
    return size <= self.inputs.numel() + self.grad.numel()

  def _ghost(self) -> bool:
    # Ghost Grams over whole patches would mix a grouped conv's groups.
    if getattr(self.module, "groups", 1) > 1:
      return False
    by_flops = use_ghost(self.module, self._rows())
    if by_flops is not None:
      return by_flops
    # Both branches cost b times one example's: the key leaves b out, so a
    # Poisson batch of a new size is not measured again.
    key = (type(self.module), self.module.extra_repr(), self._rows(),
           self.inputs.shape[1:], self.grad.shape[1:], self.grad.dtype,
           self.grad.device)
    if key not in _MEASURED:
      _MEASURED[key] = self._ghost_is_faster()
    return _MEASURED[key]

  def _ghost_is_faster(self) -> bool:
    """Times both branches, each with the clipped sum it implies."""
    ghost, _ = _seconds(self._ghost_squares)
    instantiate, per_example = _seconds(self._instantiate)
    ones = torch.ones(self.examples, device=self.grad.device)
    scaled_sum, _ = _seconds(lambda: self._scaled_weight_gradient(ones))
    # Kept per-example gradients make the sum a cheap weighting.
    instantiated_sum = 0.0 if self._small(per_example) else scaled_sum
    return ghost + scaled_sum < instantiate + instantiated_sum

  def _instantiated_squares(self, per_example: Gradients) -> torch.Tensor:
    return squares_of({a: per_example[a] for a in self.trained})

  def _rows(self) -> int:
    """n = K T, rows per example."""
    channel_axis = 1 if isinstance(self.module, nn.Conv2d) else -1
    per_copy = self.grad[0].numel() // self.grad.shape[channel_axis]
    return self.grad.shape[0] // self.examples * per_copy

  def _grouped(self) -> tuple[torch.Tensor, torch.Tensor]:
    """A^T [b, p, n] and B^T [b, d, n]: copies and positions as columns."""
    b, m = self.examples, self.module
    if isinstance(m, nn.Conv2d):
      a = F.unfold(self.inputs, m.kernel_size, m.dilation, m.padding,
                   m.stride)  # [b K, p, T]
      g = self.grad.flatten(start_dim=2)  # [b K, d, T]
    else:
      a = self.inputs.reshape(self.grad.shape[0], -1,
                              self.inputs.shape[-1]).transpose(1, 2)
      g = self.grad.reshape(self.grad.shape[0], -1,
                            self.grad.shape[-1]).transpose(1, 2)

    def by_example(t):  # [b K, c, T] -> [b, c, K T]; a view when K = 1.
      k = t.shape[0] // b
      if k == 1:
        return t
      return t.reshape(b, k, *t.shape[1:]).transpose(1, 2).reshape(
          b, t.shape[1], -1)
    return by_example(a), by_example(g)

  def _ghost_squares(self) -> torch.Tensor:
    a, g = self._grouped()
    gram_a = torch.bmm(a.transpose(1, 2), a)
    gram_g = torch.bmm(g.transpose(1, 2), g)
    squares = (gram_a * gram_g).sum(dim=(1, 2))
    if "bias" in self.trained:
      squares += g.sum(dim=2).pow(2).sum(dim=1)
    return squares

  def _instantiate(self) -> Gradients:
    """'weight' [b, *shape] and 'bias' [b, d] per example, copies summed."""
    m, b, g = self.module, self.examples, self.grad
    k = g.shape[0] // b
    if isinstance(m, nn.Conv2d):
      # Examples folded into groups: the conv's batch axis is K, so its weight
      # gradient sums the copies of each example.
      def fold(t):
        return t.view(b, k, *t.shape[1:]).transpose(0, 1).reshape(
            k, b * t.shape[1], *t.shape[2:])
      weight = torch.nn.grad.conv2d_weight(
          fold(self.inputs), (b * m.out_channels, *m.weight.shape[1:]),
          fold(g), m.stride, m.padding, m.dilation, b * m.groups)
      return {"weight": weight.view(b, *m.weight.shape),
              "bias": g.view(b, k, g.shape[1], -1).sum(dim=(1, 3))}
    a, gy = self._grouped()
    return {"weight": torch.bmm(gy, a.transpose(1, 2)), "bias": gy.sum(dim=2)}

  def _sums(self, factors: torch.Tensor) -> Gradients:
    if self._per_example is not None:
      return super()._sums(factors)
    sums = self._scaled_weight_gradient(factors)
    self.inputs = self.grad = None
    return sums

  def _scaled_weight_gradient(self, factors: torch.Tensor) -> Gradients:
    """The ordinary weight gradient of output gradients scaled by c_i."""
    k = self.grad.shape[0] // self.examples
    scale = factors.repeat_interleave(k).to(self.grad.dtype)
    scaled = self.grad * scale.view(-1, *[1] * (self.grad.dim() - 1))
    m, inputs = self.module, self.inputs
    if isinstance(m, nn.Conv2d):
      return {"weight": torch.nn.grad.conv2d_weight(
                  inputs, m.weight.shape, scaled, m.stride, m.padding,
                  m.dilation, m.groups),
              "bias": scaled.sum(dim=(0, 2, 3))}
    rows = scaled.reshape(-1, scaled.shape[-1])
    return {"weight": rows.T @ inputs.reshape(-1, inputs.shape[-1]),
            "bias": rows.sum(dim=0)}


@layer_clipper
class NormLayer(LayerClip):
  """GroupNorm and LayerNorm: out = xhat * weight + bias, per channel or per
  normalised element; their few parameters are always instantiated. timm's
  GroupNormAct (what `models` puts in place of BatchNorm) applies an
  activation after: its gradient is taken back through it."""

  @classmethod
  def covers(cls, module: nn.Module) -> bool:
    kind = type(module)
    if kind in timm_types("GroupNormAct"):
      return type(module.drop) is nn.Identity and module.affine
    return kind in _norms()

  def __init__(self, name: str, module: nn.Module, examples: int):
    super().__init__(name, module, examples)
    self._activated = isinstance(module, timm_types("GroupNormAct"))

  def take_gradient(self, grad: torch.Tensor) -> None:
    m, b = self.module, self.examples
    dtype = norm_dtype(grad, self.inputs)
    grad, x = grad.to(dtype), self.inputs.to(dtype)
    if self._activated:
      grad = self._before_activation(x, grad)
    if isinstance(m, nn.GroupNorm):
      xhat = F.group_norm(x, m.num_groups, eps=m.eps)

      def per_example(t):  # Sums copies and positions, per channel.
        return t.reshape(b, -1, t.shape[1], t[0, 0].numel()).sum(dim=(1, 3))
    else:
      xhat = F.layer_norm(x, m.normalized_shape, eps=m.eps)

      def per_example(t):  # Sums copies and tokens, per normalised element.
        return t.reshape(b, -1, *m.normalized_shape).sum(dim=1)
    kept = {}
    if "weight" in self.trained:
      kept["weight"] = per_example(grad * xhat)
    if "bias" in self.trained:
      kept["bias"] = per_example(grad)
    self.squares = squares_of(kept)
    self._keep(kept)

  def _before_activation(self, x: torch.Tensor,
                         grad: torch.Tensor) -> torch.Tensor:
    """The gradient of the norm's own output, from that of act(norm(x))."""
    m = self.module
    with torch.enable_grad():
      normed = F.group_norm(x, m.num_groups, m.weight.to(x.dtype),
                            m.bias.to(x.dtype), m.eps).requires_grad_(True)
      (before,) = torch.autograd.grad(m.act(normed.clone()), normed, grad)
    return before
