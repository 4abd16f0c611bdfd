"""Which network a config names: model families, one registry.

A model family is a kind of network that `model.name` (or `model.factory`)
chooses: it says which names are its own, which of `ModelConfig`'s options
it reads, and builds the network for a dataset's input shape and classes.
Every built-in (`models.py`: the WideResNets, the small CNN, the DP CNNs,
the ScatterNets, any timm model, your own factory) is registered with
`register`, as yours would be:

    class TinyMlp(model_families.ModelFamily):
      names = ("tiny-mlp",)

      def build(self, config, input_shape, num_classes):
        return nn.Sequential(nn.Flatten(), nn.Linear(
            math.prod(input_shape), num_classes))

    model_families.register(TinyMlp())

after which `ModelConfig("tiny-mlp")` is valid and `models.build_model`
builds it, checked as every model is (`models.py`). A family must be
registered in every process that builds its models: a search builds its
trials' in its Ray workers.

`ModelConfig` lives here, beside the registry it validates against;
`models.py`, which registers the built-ins, re-exports it.
"""

import abc
import dataclasses
from typing import Any

from torch import nn

from tan_tune import config_io
from tan_tune.errors import ConfigError
from tan_tune.training import plugins
from tan_tune.training import scatternet


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Which network to train and how its normalisation layers are arranged.

  Attributes:
    name: 'wrn-<depth>-<width>', 'small-cnn', 'dp-cnn', 'dp-cnn-gn',
      'scatternet', 'scatternet-cnn' (`scatternet.py`) or a timm model
      name, or the name of a family you registered; or None with `factory`.
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
    width: the families that read it only ('small-cnn', 'dp-cnn' and
      'dp-cnn-gn'): multiplies their channels (and the DP CNN's hidden
      units, `dp_cnn.py`).
    scales: the families that read it only (the ScatterNets): the wavelets'
      scales J (2 in the paper; J = 3 gives 217 channels per image channel
      at H / 8).
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
    if self.width != 1 and not takes(self.name, "width"):
      raise ConfigError("model.width", self.width,
                        f"1 for {self.source[1]}: only {takers('width')}"
                        " take a width multiplier")
    if not config_io.is_count(self.scales):
      raise ConfigError("model.scales", self.scales, "an integer J >= 1")
    if self.scales != scatternet.SCALES and not takes(self.name, "scales"):
      raise ConfigError("model.scales", self.scales,
                        f"{scatternet.SCALES} for {self.source[1]}: only"
                        f" {takers('scales')} take scales")
    family_of(self).check(self.name)
    if not isinstance(self.norm_before_activation, bool):
      raise ConfigError(
          "model.norm_before_activation", self.norm_before_activation,
          "must be true or false")
    if not config_io.is_count(self.num_groups):
      raise ConfigError(
          "model.num_groups", self.num_groups, "must be an integer >= 1")

  @property
  def source(self) -> tuple[str, str]:
    """The field that names the model, and its value (for errors)."""
    if self.factory is not None:
      return "model.factory", self.factory
    return "model.name", self.name


class ModelFamily(abc.ABC):
  """A kind of network a config chooses by name.

  Attributes:
    names: the exact names it answers to; a family of patterns (WideResNets
      of any depth, timm's models) lists none and overrides `matches`.
    options: the options of `ModelConfig` it reads besides `name` and
      `num_groups` ('width', 'scales'); the others must keep their defaults.
    images_only: its networks take images (C, H, W) only.
    fallback: tried after the families that list their names: it answers by
      asking a library, which costs seconds to import.
  """

  names: tuple[str, ...] = ()
  options: frozenset[str] = frozenset()
  images_only: bool = True
  fallback: bool = False

  @property
  def spelling(self) -> str | None:
    """How its names are written in the error that lists them all; None
    for a family no name chooses (your own factory)."""
    return ", ".join(map(repr, self.names)) or None

  @property
  def brief(self) -> str | None:
    """The same, in the search file's shorter list."""
    return self.spelling

  def claims(self, config: ModelConfig) -> bool:
    """Whether `config` chooses this family."""
    return (config.factory is None and isinstance(config.name, str)
            and self.matches(config.name))

  def matches(self, name: str) -> bool:
    """Whether `name` is one of this family's."""
    return name in self.names

  def check(self, name: str | None) -> None:
    """Raises ConfigError for a name of this family it cannot build."""

  @abc.abstractmethod
  def build(self, config: ModelConfig, input_shape: tuple[int, ...],
            num_classes: int) -> nn.Module:
    """A randomly initialised network mapping [N, *input_shape] to
    [N, num_classes] logits (`models.build_model` checks it)."""

  def front_end(self, config: ModelConfig) -> str | None:
    """The name of the network's fixed front end, which networks that share
    it share (`fixed_features.py`): by default its own name."""
    return config.name


_FAMILIES: list[ModelFamily] = []


def register(family: ModelFamily) -> ModelFamily:
  """Makes `family` available by its names; returns it."""
  if not isinstance(family, ModelFamily):
    raise TypeError(f"{family!r} is not a ModelFamily")
  _FAMILIES.append(family)
  return family


def families() -> list[ModelFamily]:
  """Every registered family, in the order a name is looked up: those that
  list their names first, each in the order it registered."""
  return ([f for f in _FAMILIES if not f.fallback]
          + [f for f in _FAMILIES if f.fallback])


def family_of(config: ModelConfig) -> ModelFamily:
  """The family `config` chooses.

  Raises:
    ConfigError: on model.name, with every form a name may take.
  """
  for family in families():
    if family.claims(config):
      return family
  raise ConfigError("model.name", config.name, allowed())


def takes(name: Any, option: str) -> bool:
  """Whether the family named `name` reads `option` (False when no family
  is named so)."""
  if not isinstance(name, str):
    return False
  family = next((f for f in families() if f.matches(name)), None)
  return family is not None and option in family.options


def takers(option: str) -> list[str]:
  """The names of the families that read `option`."""
  return [name for family in families() if option in family.options
          for name in family.names]


def allowed() -> str:
  """Every form a model's name may take, as a config's error says it."""
  *most, last = [f.spelling for f in families() if f.spelling]
  return f"one of {', '.join(most)}, or {last}"


def allowed_briefly() -> str:
  """The same, as the search file's `hyperparameters.model` says it."""
  *most, last = [f.brief for f in families() if f.brief]
  return f"{', '.join(most)} or {last}"
