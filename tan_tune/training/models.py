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

The built-in families, each registered here as yours would be
(`model_families.py`):

* 'wrn-<depth>-<width>' and 'small-cnn' (`wide_resnet.py`);
* 'dp-cnn': the end-to-end CNN of the DP literature for 28x28 inputs
  (Papernot et al. 2021, Tramer & Boneh 2021): two strided convolutions with
  tanh and max-pooling, two linear layers, 26,010 parameters on MNIST-sized
  images; 'dp-cnn-gn' adds GroupNorm after each convolution (`dp_cnn.py`);
* 'scatternet': fixed ScatterNet features under GroupNorm and one linear layer
  (Tramer & Boneh 2021; `scatternet.py`), for images of at least 5x5;
  'scatternet-cnn' has their small CNN on the features instead;
* any timm model name (`timm_models.py`), built from random weights and
  converted;
* your own (`factory`, `plugins.py`), on any inputs: the same rules, BatchNorm
  refused, not converted.

Any of them may start from `weights`.
"""

import dataclasses

from opacus.validators import ModuleValidator
import torch
from torch import nn

from tan_tune.errors import ConfigError
from tan_tune.training import dp_cnn
from tan_tune.training import model_families
from tan_tune.training import plugins
from tan_tune.training import scatternet
from tan_tune.training import timm_models
from tan_tune.training import wide_resnet
from tan_tune.training.model_families import ModelConfig

__all__ = ["ModelConfig", "build_model"]


class WideResNet(model_families.ModelFamily):
  """'wrn-<depth>-<width>', depth 6n+4: TAN's WideResNet."""

  spelling = ("'wrn-<depth>-<width>' with depth = 6n+4 (e.g. 'wrn-16-4',"
              " 'wrn-28-10')")
  brief = "'wrn-<depth>-<width>' (depth 6n+4)"

  def matches(self, name):
    return wide_resnet.is_wrn_name(name)

  def check(self, name):
    wide_resnet.depth_width(name)

  def build(self, config, input_shape, num_classes):
    return wide_resnet.wide_resnet(
        *wide_resnet.depth_width(config.name), input_shape[0], num_classes,
        config.num_groups, config.norm_before_activation)


class SmallCnn(model_families.ModelFamily):
  """'small-cnn': two convolutions, for tiny images."""

  names = ("small-cnn",)
  options = frozenset({"width"})

  def build(self, config, input_shape, num_classes):
    return wide_resnet.small_cnn(input_shape[0], num_classes,
                                 config.num_groups,
                                 config.norm_before_activation, config.width)


@dataclasses.dataclass(frozen=True)
class DpCnn(model_families.ModelFamily):
  """The DP literature's tanh CNN; with `group_norm`, a GroupNorm after each
  convolution."""

  name: str
  group_norm: bool
  options = frozenset({"width"})

  @property
  def names(self):
    return (self.name,)

  def build(self, config, input_shape, num_classes):
    return dp_cnn.dp_cnn(input_shape, num_classes, config.num_groups,
                         group_norm=self.group_norm, width=config.width)


@dataclasses.dataclass(frozen=True)
class ScatterNet(model_families.ModelFamily):
  """ScatterNet features under a linear head, or with `cnn_head` a small
  CNN; both share one fixed front end."""

  name: str
  cnn_head: bool
  options = frozenset({"scales"})

  @property
  def names(self):
    return (self.name,)

  def build(self, config, input_shape, num_classes):
    return scatternet.scatternet(input_shape, num_classes, config.num_groups,
                                 cnn_head=self.cnn_head, scales=config.scales)

  def front_end(self, config):
    return scatternet.NAME


class Timm(model_families.ModelFamily):
  """Any timm model, from random weights, BatchNorm made GroupNorm."""

  spelling = ("any timm model name (e.g. 'resnet18', 'nf_resnet50',"
              " 'vit_tiny_patch16_224')")
  brief = "a timm model name"
  fallback = True

  def matches(self, name):
    return timm_models.timm().is_model(name)

  def build(self, config, input_shape, num_classes):
    return timm_models.timm_model(config.name, input_shape, num_classes,
                                  config.num_groups)


class Factory(model_families.ModelFamily):
  """Your own model: `model.factory`, called with `model.kwargs`, on inputs
  of any shape."""

  images_only = False

  def claims(self, config):
    return config.factory is not None

  def build(self, config, input_shape, num_classes):
    return plugins.build_model(config.factory, config.kwargs, input_shape,
                               num_classes)


for _family in (WideResNet(), SmallCnn(),
                DpCnn(dp_cnn.NAMES[0], group_norm=False),
                DpCnn(dp_cnn.NAMES[1], group_norm=True),
                ScatterNet(scatternet.NAME, cnn_head=False),
                ScatterNet(scatternet.CNN_NAME, cnn_head=True),
                Timm(), Factory()):
  model_families.register(_family)


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
  family = model_families.family_of(config)
  if family.images_only and len(input_shape) != 3:
    raise ConfigError(*config.source, "model.factory for inputs of shape"
                      f" {input_shape}: built-in models take images (C, H, W)")
  if not isinstance(num_classes, int) or num_classes < 2:
    raise ConfigError("num_classes", num_classes, "must be an integer >= 2")

  model = family.build(config, input_shape, num_classes)
  if config.weights is not None:
    plugins.load_weights(model, config.weights)
  for module in model.modules():
    if isinstance(getattr(module, "inplace", None), bool):
      module.inplace = False
  _check_dp_compatible(model, *config.source, input_shape)
  return model


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
