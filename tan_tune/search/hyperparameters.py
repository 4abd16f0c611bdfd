"""The hyper-parameters a search file may search, and their distributions.

Each key of `RULES` (TAN section 4.2: lr, momentum mu, dampening d, EMA decay,
augmentation and AugMult order K, model and its width; JL clipping's r) says
which distribution kinds it takes, which values it accepts and which
`TrialConfig` field it sets; a `Distribution` is what one file asks for one of
them. Some are searched only when another's draw enables them (dampening with
momentum > 0, augmult with an augmentation, width with a model that has one).
"""

import dataclasses
import math
import typing
from typing import Any, Callable, Literal

import optuna

from tan_tune import config_io
from tan_tune.errors import ConfigError
from tan_tune.training import augment
from tan_tune.training import model_families
from tan_tune.training import models

Kind = Literal["choice", "uniform", "loguniform", "int"]
KINDS = typing.get_args(Kind)
# Types Optuna accepts as categorical choices.
_SCALARS = (bool, int, float, str, type(None))
# What a rule says it allows, or a function that says it when asked (a
# text that lists what is registered, which may grow after import).
Text = str | Callable[[], str]


def check(ok: bool, field: str, value: Any, allowed: str) -> None:
  if not ok:
    raise ConfigError(field, value, allowed)


def said(text: Text) -> str:
  """The text a `Text` stands for."""
  return text if isinstance(text, str) else text()


def is_number(value: Any) -> bool:
  return (isinstance(value, (int, float)) and not isinstance(value, bool)
          and math.isfinite(value))


@dataclasses.dataclass(frozen=True)
class Distribution:
  """The search distribution of one hyper-parameter.

  Attributes:
    kind: 'choice' (categorical over `values`), 'uniform' or 'loguniform'
      (floats in [low, high]), 'int' (integers in [low, high]).
    values: the options of a 'choice': numbers, strings, booleans.
    low: the lower end of a range; > 0 for 'loguniform'.
    high: the upper end of a range, > low.
  """

  kind: Kind
  values: tuple[Any, ...] | None = None
  low: float | None = None
  high: float | None = None

  def __post_init__(self) -> None:
    check(self.kind in KINDS, "kind", self.kind, f"one of {list(KINDS)}")
    if self.kind == "choice":
      for field in ("low", "high"):
        check(getattr(self, field) is None, field, getattr(self, field),
               "unset for kind 'choice', which lists its options in values")
      check(bool(self.values), "values", self.values,
             "a non-empty list for kind 'choice'")
      for i, value in enumerate(self.values):
        check(isinstance(value, _SCALARS), f"values[{i}]", value,
               "a number, string or boolean (Optuna's categorical choices)")
      return
    check(self.values is None, "values", self.values,
           f"unset for kind {self.kind!r}, which takes low and high")
    for field in ("low", "high"):
      check(getattr(self, field) is not None, field, None,
             f"required for kind {self.kind!r}")
    check(self.low < self.high, "high", self.high,
           f"greater than low = {self.low}")
    if self.kind == "loguniform":
      check(self.low > 0, "low", self.low, "> 0 for kind 'loguniform'")
    if self.kind == "int":
      for field in ("low", "high"):
        check(float(getattr(self, field)).is_integer(), field,
               getattr(self, field), "an integer for kind 'int'")

  def points(self) -> list[tuple[str, Any]]:
    """Every option of a 'choice', or the two ends of a range, by field."""
    if self.kind == "choice":
      return [(f"values[{i}]", value) for i, value in enumerate(self.values)]
    cast = int if self.kind == "int" else float
    return [("low", cast(self.low)), ("high", cast(self.high))]

  def center(self) -> Any:
    """A value that stands for the distribution: the first option of a
    'choice', the middle of a range (geometric for 'loguniform')."""
    if self.kind == "choice":
      return self.values[0]
    if self.kind == "loguniform":
      return math.sqrt(self.low * self.high)
    middle = (self.low + self.high) / 2
    return round(middle) if self.kind == "int" else middle

  def suggest(self, trial: optuna.trial.Trial, name: str) -> Any:
    """Draws this hyper-parameter for an Optuna define-by-run trial."""
    if self.kind == "choice":
      return trial.suggest_categorical(name, list(self.values))
    if self.kind == "int":
      return trial.suggest_int(name, int(self.low), int(self.high))
    return trial.suggest_float(
        name, self.low, self.high, log=self.kind == "loguniform")


@dataclasses.dataclass(frozen=True)
class Condition:
  """A hyper-parameter searched only when its parent's draw enables it.

  `fixed`, when set, is the search file's field (dotted, e.g. 'model.name')
  that stands for the parent in a file that does not search it: it must
  enable the child. Without it the parent must be searched.
  """

  parent: str
  enables: Callable[[Any], bool]
  description: Text
  fixed: str | None = None


@dataclasses.dataclass(frozen=True)
class Rule:
  """What one hyper-parameter accepts, and where it goes in TrialConfig."""

  section: str  # An attribute of trial_config.TrialConfig ...
  field: str  # ... and the attribute of that section the value sets.
  kinds: tuple[str, ...]
  accepts: Callable[[Any], bool]
  allowed: Text
  condition: Condition | None = None


def _in_unit_interval(value: Any) -> bool:
  return is_number(value) and 0 <= value <= 1


def _is_model_name(name: Any) -> bool:
  try:
    models.ModelConfig(name)
  except ConfigError:
    return False
  return True


_FLOAT_KINDS = ("choice", "uniform", "loguniform")
# In search order: a parent comes before the hyper-parameters it enables.
RULES = {
    "lr": Rule("optim", "lr", _FLOAT_KINDS,
                lambda v: is_number(v) and v > 0, "a learning rate > 0"),
    "momentum": Rule("optim", "momentum", _FLOAT_KINDS, _in_unit_interval,
                      "a number in [0, 1]"),
    "dampening": Rule(
        "optim", "dampening", _FLOAT_KINDS, _in_unit_interval,
        "a number in [0, 1]",
        # SGD ignores dampening without momentum: no trial is spent on it.
        Condition("momentum", lambda mu: mu > 0, "momentum > 0")),
    "ema_decay": Rule("optim", "ema_decay", _FLOAT_KINDS,
                       lambda v: is_number(v) and 0 <= v < 1,
                       "a number in [0, 1)"),
    "augmentation": Rule("augment", "family", ("choice",),
                          lambda v: v in augment.FAMILIES,
                          f"one of {list(augment.FAMILIES)}"),
    "augmult": Rule(
        "augment", "multiplicity", ("choice", "int"),
        config_io.is_count,
        "an integer K >= 1",
        # AugMult averages over K augmentations; 'none' has nothing to average.
        Condition("augmentation", lambda family: family != "none",
                   "augmentation is not 'none'")),
    "model": Rule("model", "name", ("choice",), _is_model_name,
                   model_families.allowed_briefly),
    # With a searched model, drawn only for the models that take a width.
    "width": Rule("model", "width", _FLOAT_KINDS,
                  lambda v: is_number(v) and v > 0,
                  "a width multiplier > 0 (of small-cnn or the DP CNN)",
                  Condition("model",
                            lambda name: model_families.takes(name, "width"),
                            lambda: "the model takes a width"
                            f" ({', '.join(model_families.takers('width'))})",
                            fixed="model.name")),
    # The model's GroupNorms (the ScatterNet's, the DP CNN's and those that
    # replace a timm model's BatchNorms): each takes the largest divisor of
    # its channels at most this.
    "num_groups": Rule(
        "model", "num_groups", ("choice", "int"),
        config_io.is_count,
        "an integer >= 1 (GroupNorm's groups)"),
    # The ScatterNets' wavelet scales J: more give coarser features, more
    # channels (`scatternet.py`).
    "scales": Rule(
        "model", "scales", ("choice", "int"),
        config_io.is_count,
        "an integer J >= 1 (the ScatterNet's wavelet scales)",
        Condition("model", lambda name: model_families.takes(name, "scales"),
                  lambda: "the model is one of"
                  f" {model_families.takers('scales')}",
                  fixed="model.name")),
    # With clipping 'jl' only (`space.SearchSpace` checks): each r has its
    # own eps, and the budget is checked at every one searched.
    "jl_projections": Rule(
        "privacy", "jl_projections", ("choice", "int"),
        config_io.is_count,
        "an integer r >= 1 (JL clipping's projections)"),
}
HYPERPARAMETERS = tuple(RULES)


