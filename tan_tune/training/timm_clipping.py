"""Fast clipping of timm's own parameterisations: weight-standardised convs
(NF-ResNets, NFNets) and a ViT's position embedding and tokens.

Like the classes of `layer_clipping`, each gives |g_i|^2 of its parameters for
each example i from the tensors of one forward and one backward pass, then
sum_i c_i g_i. The closed form for weight standardisation is checked against
per-example autograd in tests/training/test_timm_clipping.py.
"""

import torch
from torch import nn
from torch.nn import functional as F
from timm.layers import std_conv
from timm.models import vision_transformer

from tan_tune.training.layer_clipping import Gradients
from tan_tune.training.layer_clipping import LayerClip
from tan_tune.training.layer_clipping import WeightLayer
from tan_tune.training.layer_clipping import layer_clipper
from tan_tune.training.layer_clipping import norm_dtype
from tan_tune.training.layer_clipping import squares_of


@layer_clipper
class StdConvLayer(WeightLayer):
  """timm's ScaledStdConv2d (NF-ResNets): a conv with the weight
  W_o = gamma_o (w_o - mean w_o) / s_o, s_o = sqrt(|w_o - mean w_o|^2 / n
  + eps), gamma_o = gain_o n^-1/2, n the fan-in; always instantiated.

  With G_o the per-example gradient with respect to W_o (a plain conv's),
  u_o = (w_o - mean w_o) / s_o and rho_o = |u_o|^2 / n:

      |dL/dw_o|^2 = (gamma_o / s_o)^2 [|G_o|^2 - (1.G_o)^2 / n
                                       - (2 - rho_o) (u_o.G_o)^2 / n],
      dL/dgain_o = n^-1/2 (u_o.G_o).

  Both are linear in G, so the clipped sum is the standardisation's backward
  applied to sum_i c_i G_i.
  """

  ATTRIBUTES = ("weight", "bias", "gain")

  @classmethod
  def covers(cls, module: nn.Module) -> bool:
    return type(module) is std_conv.ScaledStdConv2d

  def _ghost(self) -> bool:
    return False  # The closed form needs G_o per output channel.

  def _instantiated_squares(self, per_example: Gradients) -> torch.Tensor:
    m = self.module
    g = per_example["weight"].flatten(start_dim=2)  # [b, d, n]
    n = g.shape[-1]
    w = m.weight.detach().to(g.dtype).flatten(start_dim=1)
    centred = w - w.mean(dim=1, keepdim=True)
    s = (centred.pow(2).mean(dim=1) + m.eps).sqrt()
    u = centred / s[:, None]
    u_dot_g = torch.einsum("dn,bdn->bd", u, g)
    squares = torch.zeros_like(g[:, 0, 0])
    if "weight" in self.trained:
      rho = u.pow(2).sum(dim=1) / n
      gamma = m.gain.detach().to(g.dtype).flatten() * m.scale
      per_channel = (g.pow(2).sum(dim=2) - g.sum(dim=2).pow(2) / n
                     - (2 - rho) * u_dot_g.pow(2) / n)
      squares += ((gamma / s).pow(2) * per_channel).sum(dim=1)
    if "gain" in self.trained:
      squares += (m.scale * u_dot_g).pow(2).sum(dim=1)
    if "bias" in self.trained:
      squares += per_example["bias"].pow(2).sum(dim=1)
    return squares

  def weighted_sums(self, factors: torch.Tensor) -> Gradients:
    m = self.module
    sums = self._sums(factors)  # 'weight' here is sum_i c_i G_i.
    wanted = [a for a in ("weight", "gain") if a in self.trained]
    if wanted:
      with torch.enable_grad():
        leaves = {a: getattr(m, a).detach().to(sums["weight"].dtype)
                  .requires_grad_(True) for a in ("weight", "gain")}
        standardised = F.batch_norm(
            leaves["weight"].reshape(1, m.out_channels, -1), None, None,
            weight=(leaves["gain"] * m.scale).view(-1), training=True,
            momentum=0.0, eps=m.eps)
        grads = torch.autograd.grad(
            standardised, [leaves[a] for a in wanted],
            sums["weight"].reshape_as(standardised))
      sums.update(zip(wanted, grads))
    return {self.key(a): sums[a].to(getattr(m, a).dtype)
            for a in self.trained}


@layer_clipper
class PositionLayer(LayerClip):
  """A timm VisionTransformer's own parameters: position embedding, class
  and register tokens, all added or concatenated before `pos_drop`.

  With h the gradient of the embedded tokens (the input of `pos_drop`), the
  per-example gradients are h summed over the K copies, at the tokens each
  parameter reaches: all of them (pos_embed, or the patch tokens under
  `no_embed_class`), token 0 (cls_token), the next R (reg_token).
  """

  ATTRIBUTES = ("pos_embed", "cls_token", "reg_token")

  @classmethod
  def covers(cls, module: nn.Module) -> bool:
    # A resampled embedding (dynamic_img_size) is not a plain addition.
    return (type(module) is vision_transformer.VisionTransformer
            and not getattr(module, "dynamic_img_size", True)
            and type(getattr(module, "pos_drop", None)) is nn.Dropout)

  def watch(self, callback) -> torch.utils.hooks.RemovableHandle:
    def hook(module, args):
      return (callback(args[0]), *args[1:])
    return self.module.pos_drop.register_forward_pre_hook(hook)

  def take_gradient(self, grad: torch.Tensor) -> None:
    m, b = self.module, self.examples
    h = grad.reshape(b, -1, *grad.shape[1:]).sum(dim=1).to(norm_dtype(grad))
    prefix = m.num_prefix_tokens
    cls = 1 if m.cls_token is not None else 0
    tokens = {"pos_embed": h[:, prefix:] if m.no_embed_class else h,
              "cls_token": h[:, :cls],
              "reg_token": h[:, cls:prefix]}
    kept = {a: tokens[a].unsqueeze(1) for a in self.trained}
    self.squares = squares_of(kept)
    self._keep(kept)
