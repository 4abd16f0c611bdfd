"""Fast clipping of a GroupNorm + linear head, in closed form.

The ScatterNet classifier trains, on features computed once, the head

    h(x) = W flatten(y) + b,   y = gamma xhat + beta,

with xhat the features normalised per group (no parameters) and gamma, beta
per channel. For example i with one copy (no AugMult) and e_i = softmax(h)
- onehot(label), the gradient of its loss by the output of the head, its
gradient is known in closed form:

    g_W = e_i y_i^T,   |g_W|^2 = |e_i|^2 |y_i|^2,   g_b = e_i,
    u_i = W^T e_i,     g_gamma[c] = sum_p u_i[c, p] xhat_i[c, p],
                       g_beta[c]  = sum_p u_i[c, p],

p running over a channel's positions. So |g_i|, c_i = min(1, C / |g_i|) and
sum_i w_i c_i g_i take a few matrix products over the batch, where the
general path (`fast_clipping`) records a forward, runs a backward and
normalises the features a second time: a step of the Fashion-MNIST head
costs a third. The sums are the same (tests/training/test_norm_head_clipping.py
checks them against per-example autograd in float64).
"""

import torch
from torch import nn
from torch.nn import functional as F

Gradients = dict[str, torch.Tensor]


def covers(model: nn.Module, images: torch.Tensor) -> bool:
  """True when `model` is exactly an `nn.Sequential` of GroupNorm (affine),
  Flatten and Linear (with a bias) that fits `images` [b, K, C, ...] with
  K = 1 copy, every parameter trained and no hook on any of them (a
  subclass or a hook may change the forward the formulas assume)."""
  if type(model) is not nn.Sequential or len(model) != 3:
    return False
  norm, flatten, linear = model
  if any(m._forward_hooks or m._forward_pre_hooks  # pylint: disable=protected-access
         for m in (model, norm, flatten, linear)):
    return False
  return (type(norm) is nn.GroupNorm and norm.affine
          and type(flatten) is nn.Flatten
          and (flatten.start_dim, flatten.end_dim) == (1, -1)
          and type(linear) is nn.Linear and linear.bias is not None
          and all(p.requires_grad for p in model.parameters())
          and images.dim() >= 3 and images.shape[1] == 1
          and images.shape[2] == norm.num_channels
          and images[0, 0].numel() == linear.in_features)


@torch.no_grad()
def clipped_sum(
    model: nn.Sequential, images: torch.Tensor, labels: torch.Tensor,
    clip_norm: float, weights: torch.Tensor | None,
) -> tuple[Gradients, torch.Tensor, torch.Tensor]:
  """sum_i w_i c_i g_i by parameter name, each |g_i| and each loss, for a
  head that `covers` accepts.

  The features are read four times (normalised, then contracted with W,
  squared, and summed into g_W), never the batch's [b, C P] products: on a
  CPU each pass costs what memory does. With a[i, k, c] = sum_p W[k, c, p]
  xhat_i[c, p], s1 and s2 the sums of xhat_i and its squares per channel,
  and P positions: logit_k = sum_c gamma_c a[k, c] + sum_c beta_c sum_p
  W[k, c, p] + b_k, g_gamma = e_i^T a, |y_i|^2 = sum_c gamma_c^2 s2[c] +
  2 gamma_c beta_c s1[c] + P beta_c^2.

  Args:
    model: GroupNorm, Flatten, Linear.
    images: [b, 1, C, H, W] (the features).
    labels: [b].
    clip_norm: C.
    weights: [b], w_i (0 for padding rows); None is all ones.
  """
  (norm_name, norm), _, (linear_name, linear) = model.named_children()
  b, _, channels = images.shape[:3]
  xhat = F.group_norm(images[:, 0], norm.num_groups, eps=norm.eps).view(
      b, channels, -1)
  positions = xhat.shape[2]
  w = linear.weight.view(-1, channels, positions)
  gamma, beta = norm.weight, norm.bias
  # One pass for a and s1: a row of ones under W sums xhat.
  a = torch.einsum("bcp,kcp->bkc", xhat,
                   torch.cat([w, w.new_ones(1, channels, positions)]))
  a, s1 = a[:, :-1], a[:, -1]
  s2 = torch.linalg.vector_norm(xhat, dim=2).pow(2)
  w_sums = w.sum(dim=2)  # [k, C]: sum_p W[k, c, p].
  logits = a @ gamma + w_sums @ beta + linear.bias
  losses = F.cross_entropy(logits, labels, reduction="none")
  e = logits.softmax(dim=1)
  # Probabilities below the smallest normal float (a confident example's
  # other classes) become 0: CPUs multiply denormal operands on a slow path
  # (a Fashion-MNIST step took 1.7x as long), and each moves the sums by
  # less than 1e-38.
  e = torch.where(e < torch.finfo(e.dtype).tiny, 0, e)
  e[torch.arange(b, device=e.device), labels] -= 1
  per_channel = {"weight": torch.einsum("bk,bkc->bc", e, a),
                 "bias": e @ w_sums}
  dtype = torch.promote_types(torch.float32, xhat.dtype)
  s1, s2, g, c = (t.to(dtype) for t in (s1, s2, gamma, beta))
  quadratic, constant = s2 * g.pow(2), positions * c.pow(2)
  y_squared = (quadratic + 2 * s1 * g * c + constant).sum(dim=1)
  # The expansion may cancel (a channel with gamma xhat near -beta at every
  # position), and an underestimated |g_i| would let a clipped g_i past C:
  # a bound on its rounding, from sums of P and of C terms, is added, so
  # |g_i| is not below the exact norm (otherwise larger by a relative
  # 2 (P + C) eps: 1e-5 in float32, 6e-14 in float64).
  y_squared += 2 * (positions + channels) * torch.finfo(dtype).eps * (
      quadratic + 2 * (positions * s2).sqrt() * (g * c).abs()
      + constant).sum(dim=1)
  squares = e.to(dtype).pow(2).sum(dim=1) * (y_squared + 1)
  for g in per_channel.values():
    squares += g.to(dtype).pow(2).sum(dim=1)
  norms = squares.sqrt()
  factors = clip_norm / norms.clamp(min=clip_norm)
  if weights is not None:
    factors = factors * weights.to(factors.dtype)
  factors = factors.to(xhat.dtype)
  scaled = e * factors[:, None]
  scaled_sum = scaled.sum(dim=0)
  # sum_i s_i e_i y_i^T, with y = gamma xhat + beta per channel.
  on_xhat = (scaled.T @ xhat.flatten(start_dim=1)).view(-1, channels, positions)
  gradients = {
      f"{linear_name}.weight": (
          on_xhat * gamma.view(1, -1, 1)
          + scaled_sum.view(-1, 1, 1) * beta.view(1, -1, 1)).flatten(1),
      f"{linear_name}.bias": scaled_sum}
  for name, g in per_channel.items():
    gradients[f"{norm_name}.{name}"] = factors @ g
  return gradients, norms, losses
