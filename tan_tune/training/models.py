"""Classifiers whose per-sample gradients DP-SGD can clip.

The trial engine computes one gradient per sample with `torch.func` (`vmap` of
`grad` over `functional_call`), where a sample may be a stack of K augmented
copies fed as a batch of K (augmentation multiplicity, TAN appendix C). Every
model built here therefore obeys three rules:

* No BatchNorm. BatchNorm normalises with statistics of the whole batch, so one
  sample's output, and hence its gradient, depends on the other samples: the
  per-sample sensitivity that DP-SGD bounds by clipping no longer holds (TAN
  section 4.4). GroupNorm normalises each sample on its own and replaces it.
* No in-place activations. An in-place op overwrites a tensor that autograd or
  a vmapped transform may still need, which either raises or silently corrupts
  gradients; every module's `inplace` flag is therefore off.
* It must run under `torch.func.vmap`, which every build checks by computing
  per-sample gradients of two fake samples before returning.

Normalisation order. TAN section 4.4 finds that under DP-SGD a 16-4
WideResNet trains clearly better with CONV-ACT-NORM (after Brock et al.,
2021a) than with the usual CONV-NORM-ACT, and only then benefits from
augmentation multiplicity: it is the default; `norm_before_activation`
switches back for ablations.

Supported names:
* 'wrn-<depth>-<width>': the pre-activation WideResNet of Zagoruyko &
  Komodakis (2016) as used by TAN on CIFAR-10 (e.g. 'wrn-16-4').
* 'small-cnn': a two-layer CNN for tiny images such as 1x8x8 digits.
* 'dp-cnn': the end-to-end CNN of the DP literature for 28x28 inputs
  (Papernot et al. 2021, Tramer & Boneh 2021): two strided convolutions with
  tanh and max-pooling, two linear layers, 26,010 parameters on MNIST-sized
  images; 'dp-cnn-gn' adds GroupNorm after each convolution.
* 'scatternet': fixed ScatterNet features under GroupNorm and one linear layer
  (Tramer & Boneh 2021; `scatternet.py`), for images of at least 5x5;
  'scatternet-cnn' has their small CNN on the features instead.
* any timm model name (e.g. 'resnet18', 'nf_resnet50', the NF-ResNet the paper
  found best on ImageNet, appendix B), built from random weights and converted.
Or your own (`factory`, `plugins.py`), on any inputs: the same rules, BatchNorm
refused, not converted. Either may start from `weights`.
"""

import collections
import dataclasses
import re
from typing import Any

from opacus.validators import ModuleValidator
import torch
from torch import nn

from tan_tune import config_io
from tan_tune.errors import ConfigError
from tan_tune.training import dp_cnn
from tan_tune.training import plugins
from tan_tune.training import scatternet

_WRN_NAME = re.compile(r"wrn-(\d+)-(\d+)")
_SMALL_CNN = "small-cnn"
# The models whose channels `ModelConfig.width` multiplies.
WIDTH_MODELS = (_SMALL_CNN, *dp_cnn.NAMES)
_VALID_NAMES = (
    "one of 'wrn-<depth>-<width>' with depth = 6n+4 (e.g. 'wrn-16-4',"
    " 'wrn-28-10'), 'small-cnn', 'dp-cnn', 'dp-cnn-gn', 'scatternet',"
    " 'scatternet-cnn', or any timm model name (e.g. 'resnet18', 'nf_resnet50',"
    " 'vit_tiny_patch16_224')"
)


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Which network to train and how its normalisation layers are arranged.

  Attributes:
    name: 'wrn-<depth>-<width>', 'small-cnn', 'dp-cnn', 'dp-cnn-gn',
      'scatternet', 'scatternet-cnn' (`scatternet.py`) or a timm model
      name; or None with `factory`.
    norm_before_activation: False gives CONV-ACT-NORM, the order TAN section
      4.4 found better under DP-SGD; True gives the usual CONV-NORM-ACT. Only
      'wrn-*' and 'small-cnn' honour it: timm models keep the order their
      authors designed.
    num_groups: GroupNorm groups (16 in TAN). A layer whose channel count it
      does not divide uses the largest divisor of that count not above it.
    factory: your own model instead of a name: 'package.module:callable',
      called with `kwargs` wherever the run trains (`plugins.py`).
    kwargs: the factory's keyword arguments.
    weights: a local file of `torch.save(model.state_dict())` loaded into
      the model after it is built (pretrained weights; public pre-training
      is outside the privacy guarantee). Its SHA-256 names it in the plan.
    width: 'small-cnn', 'dp-cnn' and 'dp-cnn-gn' only: multiplies their
      channels (and the DP CNN's hidden units, `dp_cnn.py`).
    scales: the ScatterNets only: the wavelets' scales J (2 in the paper;
      J = 3 gives 217 channels per image channel at H / 8).
  """

  name: str | None = None
  norm_before_activation: bool = False
  num_groups: int = 16
  factory: str | None = None
  kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
  weights: str | None = None
  width: float = 1.0
  scales: int = scatternet.SCALES

  def __post_init__(self) -> None:
    plugins.check_fields("model", self.name, self.factory, self.kwargs)
    plugins.check_path("model.weights", self.weights)
    if (not isinstance(self.width, (int, float))
        or isinstance(self.width, bool) or not self.width > 0):
      raise ConfigError("model.width", self.width, "a multiplier > 0")
    if self.width != 1 and self.name not in WIDTH_MODELS:
      raise ConfigError("model.width", self.width,
                        f"1 for {self.source[1]}: only {list(WIDTH_MODELS)}"
                        " take a width multiplier")
    if not config_io.is_count(self.scales):
      raise ConfigError("model.scales", self.scales, "an integer J >= 1")
    if self.scales != scatternet.SCALES and self.name not in scatternet.NAMES:
      raise ConfigError("model.scales", self.scales,
                        f"{scatternet.SCALES} for {self.source[1]}: only"
                        f" {list(scatternet.NAMES)} take scales")
    if self.factory is None:
      self._check_name()
    if not isinstance(self.norm_before_activation, bool):
      raise ConfigError(
          "model.norm_before_activation", self.norm_before_activation,
          "must be true or false")
    if not config_io.is_count(self.num_groups):
      raise ConfigError(
          "model.num_groups", self.num_groups, "must be an integer >= 1")

  def _check_name(self) -> None:
    if not isinstance(self.name, str):
      raise ConfigError("model.name", self.name, _VALID_NAMES)
    if (_wrn_depth_width(self.name) is None
        and self.name not in (_SMALL_CNN, *scatternet.NAMES, *dp_cnn.NAMES)):
      if not _timm().is_model(self.name):
        raise ConfigError("model.name", self.name, _VALID_NAMES)

  @property
  def source(self) -> tuple[str, str]:
    """The field that names the model, and its value (for errors)."""
    if self.factory is not None:
      return "model.factory", self.factory
    return "model.name", self.name


def build_model(
    config: ModelConfig, input_shape: tuple[int, ...], num_classes: int
) -> nn.Module:
  """Builds a randomly initialised, DP-compatible classifier in train mode.

  Args:
    config: which network to build.
    input_shape: of one input: (channels, height, width) for an image,
      which every built-in model needs; any shape for a factory's model.
    num_classes: number of output logits.

  Returns:
    A model mapping [N, *input_shape] to [N, num_classes] logits, without
    BatchNorm or in-place modules, whose per-sample gradients `torch.func`
    computes. Weights draw from torch's global RNG; the checks do not.

  Raises:
    ConfigError: invalid inputs, or a model that cannot be DP-compatible.
  """
  if not input_shape or not all(isinstance(d, int) and d >= 1
                                 for d in input_shape):
    raise ConfigError("input_shape", input_shape, "positive integers")
  if config.factory is None and len(input_shape) != 3:
    raise ConfigError(*config.source, "model.factory for inputs of shape"
                      f" {input_shape}: built-in models take images (C, H, W)")
  if not isinstance(num_classes, int) or num_classes < 2:
    raise ConfigError("num_classes", num_classes, "must be an integer >= 2")

  in_channels = input_shape[0]
  depth_width = (None if config.factory is not None
                 else _wrn_depth_width(config.name))
  if config.factory is not None:
    model = plugins.build_model(config.factory, config.kwargs, input_shape,
                                num_classes)
  elif depth_width is not None:
    model = _wide_resnet(*depth_width, in_channels, num_classes, config)
  elif config.name == _SMALL_CNN:
    model = _small_cnn(in_channels, num_classes, config)
  elif config.name in dp_cnn.NAMES:
    model = dp_cnn.dp_cnn(input_shape, num_classes, config.num_groups,
                          group_norm=config.name == "dp-cnn-gn",
                          width=config.width)
  elif config.name in scatternet.NAMES:
    model = scatternet.scatternet(input_shape, num_classes, config.num_groups,
                                  cnn_head=config.name == scatternet.CNN_NAME,
                                  scales=config.scales)
  else:
    model = _timm_model(config, input_shape, num_classes)
  if config.weights is not None:
    plugins.load_weights(model, config.weights)
  for module in model.modules():
    if isinstance(getattr(module, "inplace", None), bool):
      module.inplace = False
  _check_dp_compatible(model, *config.source, input_shape)
  return model


def _wrn_depth_width(name: str) -> tuple[int, int] | None:
  """Parses 'wrn-D-W'; None if `name` is not of that form at all."""
  match = _WRN_NAME.fullmatch(name)
  if match is None:
    return None
  depth, width = int(match[1]), int(match[2])
  # Zagoruyko & Komodakis count 3 stages of n two-conv blocks as depth 6n+4.
  if depth < 10 or (depth - 4) % 6:
    raise ConfigError(
        "model.name", name,
        "WideResNet depth must be 6n+4 with n >= 1 (10, 16, 22, 28, ...)")
  if width < 1:
    raise ConfigError("model.name", name, "WideResNet width must be >= 1")
  return depth, width


def _norm_act(channels: int, config: ModelConfig) -> nn.Sequential:
  """GroupNorm and ReLU in the order `config` asks for (TAN section 4.4).

  The children are named 'norm' and 'act' in both orders so that parameter
  names, and thus checkpoints, do not depend on the order.
  """
  layers = {
      "norm": nn.GroupNorm(dp_cnn.group_count(channels, config.num_groups), channels),
      "act": nn.ReLU(inplace=False),
  }
  order = ("norm", "act") if config.norm_before_activation else ("act", "norm")
  return nn.Sequential(collections.OrderedDict((k, layers[k]) for k in order))


def _conv3x3(in_channels: int, out_channels: int, stride: int = 1) -> nn.Conv2d:
  return nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1)


class _WideBlock(nn.Module):
  """Pre-activation residual block, as in TAN's WideResNet.

  The normalisation and activation come before each convolution, so the
  sequence through a stack of blocks is CONV-[NORM, ACT]-CONV-... with the
  bracket ordered by `config`. A shortcut that changes shape gets its own
  norm-act pair and 1x1 convolution.
  """

  def __init__(self, in_channels: int, out_channels: int, stride: int,
               config: ModelConfig):
    super().__init__()
    self.residual = nn.Sequential(
        _norm_act(in_channels, config),
        _conv3x3(in_channels, out_channels, stride),
        _norm_act(out_channels, config),
        _conv3x3(out_channels, out_channels),
    )
    if in_channels == out_channels and stride == 1:
      self.shortcut = nn.Identity()
    else:
      self.shortcut = nn.Sequential(
          _norm_act(in_channels, config),
          nn.Conv2d(in_channels, out_channels, 1, stride=stride),
      )

  def forward(self, x: torch.Tensor) -> torch.Tensor:
    # Out of place: `x` is still referenced by autograd and by vmap.
    return self.shortcut(x) + self.residual(x)


def _wide_resnet(depth: int, width: int, in_channels: int, num_classes: int,
                 config: ModelConfig) -> nn.Sequential:
  """WRN-depth-width; stages at 1, 1/2, 1/4 resolution, any input size."""
  blocks_per_stage = (depth - 4) // 6
  layers = collections.OrderedDict(stem=_conv3x3(in_channels, 16))
  channels = 16
  for stage, stage_channels in enumerate((16 * width, 32 * width, 64 * width)):
    blocks = []
    for i in range(blocks_per_stage):
      stride = 2 if stage > 0 and i == 0 else 1
      blocks.append(_WideBlock(channels, stage_channels, stride, config))
      channels = stage_channels
    layers[f"stage{stage + 1}"] = nn.Sequential(*blocks)
  # Adaptive pooling instead of TAN's fixed 8x8 pool so that 8x8 digits work.
  layers.update(norm_act=_norm_act(channels, config),
                pool=nn.AdaptiveAvgPool2d(1), flatten=nn.Flatten(),
                fc=nn.Linear(channels, num_classes))
  return _lecun_init(nn.Sequential(layers))


def _small_cnn(in_channels: int, num_classes: int,
               config: ModelConfig) -> nn.Sequential:
  """Two convolutions and a linear head, enough for 8x8 digits.

  Pooling to a fixed 4x4 grid (the native size after the strided conv on 8x8
  inputs) keeps the head's size independent of the image size.
  """
  first, second = (max(1, round(c * config.width)) for c in (32, 64))
  return _lecun_init(nn.Sequential(collections.OrderedDict(
      conv1=_conv3x3(in_channels, first),
      norm_act1=_norm_act(first, config),
      conv2=_conv3x3(first, second, stride=2),
      norm_act2=_norm_act(second, config),
      pool=nn.AdaptiveAvgPool2d(4),
      flatten=nn.Flatten(),
      fc=nn.Linear(second * 4 * 4, num_classes),
  )))


def _lecun_init(model: nn.Sequential) -> nn.Sequential:
  """Weights ~ truncated N(0, 1/fan_in), zero biases: TAN's WRN init.

  Matching the paper's init (its `init=0`, after De et al., 2022) keeps
  results comparable with its CIFAR-10 numbers.
  """
  for module in model.modules():
    if isinstance(module, (nn.Conv2d, nn.Linear)):
      fan_in = module.weight[0].numel()
      nn.init.trunc_normal_(module.weight, std=fan_in**-0.5)
      nn.init.zeros_(module.bias)
  return model


def _timm():
  """timm, imported when a model needs it: with the torchvision and
  torch._dynamo it loads, it costs seconds that every process (a Ray worker
  too) of a run without a timm model saves."""
  import timm  # pylint: disable=g-import-not-at-top
  return timm


def _timm_model(config: ModelConfig, input_shape: tuple[int, int, int],
                num_classes: int) -> nn.Module:
  """Creates a timm model from random weights with BatchNorm -> GroupNorm."""
  kwargs = {}
  timm = _timm()
  pretrained_cfg = timm.models.get_pretrained_cfg(config.name)
  # Models with a fixed input grid (ViT, Swin, ...) must be told the size.
  if pretrained_cfg is not None and pretrained_cfg.fixed_input_size:
    kwargs["img_size"] = input_shape[1:]
  model = timm.create_model(
      config.name, pretrained=False, num_classes=num_classes,
      in_chans=input_shape[0], **kwargs)
  model = _batch_norm_to_group_norm(model, config.num_groups)
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
  norm = _timm().layers.GroupNormAct(
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


def _check_dp_compatible(model: nn.Module, field: str, name: str,
                         input_shape: tuple[int, ...]) -> None:
  """Raises ConfigError unless Opacus and a per-sample gradient accept it."""
  errors = ModuleValidator.validate(model, strict=False)
  if errors:
    raise ConfigError(
        field, name,
        f"cannot be made DP-compatible: {'; '.join(map(str, errors))}")

  params = {k: v.detach() for k, v in model.named_parameters()}
  buffers = dict(model.named_buffers())

  def sample_loss(params: dict[str, torch.Tensor],
                  sample: torch.Tensor) -> torch.Tensor:
    logits = torch.func.functional_call(
        model, (params, buffers), (sample.unsqueeze(0),))
    return logits.sum()

  # Fork the RNG so that building a model consumes the same random numbers
  # whether or not it has dropout.
  with torch.random.fork_rng(devices=[]):
    try:
      torch.func.vmap(
          torch.func.grad(sample_loss), in_dims=(None, 0),
          randomness="different")(params, torch.randn(2, *input_shape))
    except Exception as e:  # pylint: disable=broad-except
      # Any failure here means the trial engine would fail the same way.
      raise ConfigError(
          field, name,
          f"per-sample gradients with torch.func fail on {input_shape}"
          f" inputs: {type(e).__name__}: {e}") from e
