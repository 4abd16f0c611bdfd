"""timm's models made DP-compatible: random weights, BatchNorm replaced.

Any timm model name (e.g. 'resnet18', 'nf_resnet50', the NF-ResNet the
paper found best on ImageNet, appendix B) is built from random weights,
every BatchNorm replaced by a GroupNorm and Opacus' fixers applied to the
other layers it knows.
"""

from opacus.validators import ModuleValidator
import torch
from torch import nn

from tan_tune.training import dp_cnn


def timm():
  """timm, imported when a model needs it: with the torchvision and
  torch._dynamo it loads, it costs seconds that every process (a Ray worker
  too) of a run without a timm model saves."""
  import timm as timm_lib  # pylint: disable=g-import-not-at-top
  return timm_lib


def timm_model(name: str, input_shape: tuple[int, ...], num_classes: int,
               num_groups: int) -> nn.Module:
  """Creates a timm model from random weights with BatchNorm -> GroupNorm."""
  kwargs = {}
  library = timm()
  pretrained_cfg = library.models.get_pretrained_cfg(name)
  # Models with a fixed input grid (ViT, Swin, ...) must be told the size.
  if pretrained_cfg is not None and pretrained_cfg.fixed_input_size:
    kwargs["img_size"] = input_shape[1:]
  model = library.create_model(
      name, pretrained=False, num_classes=num_classes,
      in_chans=input_shape[0], **kwargs)
  model = _batch_norm_to_group_norm(model, num_groups)
  # Opacus' fixers cover the other layers it knows (e.g. attention, LSTM).
  return ModuleValidator.fix(model)


def _batch_norm_to_group_norm(module: nn.Module, num_groups: int) -> nn.Module:
  """Replaces every BatchNorm, including timm's fused BatchNormAct2d.

  Opacus' own fixer matches exact types only, so it misses timm's subclasses
  and would drop the activation fused into them.
  """
  for name, child in module.named_children():
    module.add_module(name, _batch_norm_to_group_norm(child, num_groups))
  if not isinstance(module, nn.modules.batchnorm._BatchNorm):
    return module
  channels = module.num_features
  norm = timm().layers.GroupNormAct(
      channels, dp_cnn.group_count(channels, num_groups), eps=module.eps,
      affine=module.affine, apply_act=False)
  norm.drop = getattr(module, "drop", norm.drop)
  norm.act = getattr(module, "act", norm.act)
  if module.affine:
    # Keeps the architecture's init, e.g. ResNets' zero-init last norm.
    with torch.no_grad():
      norm.weight.copy_(module.weight)
      norm.bias.copy_(module.bias)
  return norm
