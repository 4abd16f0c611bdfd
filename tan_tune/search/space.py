"""Search spaces: what a search tries, and at which simulated triplet.

A search file names a reference run (B_ref, sigma_ref, S) on N examples, the
run whose accuracy the search predicts and which `promote` finally trains
privately, and the distributions of the non-privacy hyper-parameters (TAN
section 4.2: lr, momentum mu, dampening d, EMA decay, augmentation and AugMult
order K, model). Every trial runs at a small batch B with

    sigma = sigma_ref * B / B_ref,   same S,

which keeps eta_step = q / (sqrt(2) sigma), hence predicts the reference run
at B_ref / B times less compute (section 3.4). With a `steps_grid`, a trial
also picks S; the reference becomes the constant-eta triplet
(B_ref sqrt(S_ref / S), sigma_ref, S) with lr scaled by S_ref / S (section
4.3, table 3), simulated the same way.

Files are read with `config_io`, so every mistake is a `ConfigError` naming
the dotted field (e.g. 'hyperparameters.momentum.values[2]'). Checks that need
N live in `check_against_dataset`, so that a file validates without its data.
"""

import collections
import dataclasses
import math
import pathlib
import re
import typing
from typing import Any, Callable, Literal

import optuna

from tan_tune import accounting
from tan_tune import augment
from tan_tune import config_io
from tan_tune import datasets
from tan_tune import models
from tan_tune import trial as trial_lib
from tan_tune import triplet as triplet_lib
from tan_tune.errors import ConfigError

Kind = Literal["choice", "uniform", "loguniform", "int"]
KINDS = typing.get_args(Kind)
# The trial metrics a search may rank by (`trial.run_trial` reports them).
METRICS = ("accuracy", "ema_accuracy", "augtest_accuracy")
# Held out of the training set to rank trials on, unless select_on is 'test'.
DEFAULT_VALIDATION_FRACTION = 0.1
SELECT_ON_TEST_WARNING = (
    "select_on: test ranks trials on the test split (the TAN paper's"
    " practice): the promoted run's test accuracy is then optimistic")
# Keys a trial's params hold besides the hyper-parameters.
SIMULATION_BATCH_SIZE = "simulation_batch_size"
STEPS = "steps"
# Sizing these needs no files, so their files are checked against N on load.
_IN_MEMORY_DATASETS = ("digits", "synthetic")
# Also a directory name for the driver: one path component.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# What `trial.run_trial` accepts.
_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")
# Types Optuna accepts as categorical choices.
_SCALARS = (bool, int, float, str, type(None))


def _check(ok: bool, field: str, value: Any, allowed: str) -> None:
  if not ok:
    raise ConfigError(field, value, allowed)


def _is_number(value: Any) -> bool:
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
    _check(self.kind in KINDS, "kind", self.kind, f"one of {list(KINDS)}")
    if self.kind == "choice":
      for field in ("low", "high"):
        _check(getattr(self, field) is None, field, getattr(self, field),
               "unset for kind 'choice', which lists its options in values")
      _check(bool(self.values), "values", self.values,
             "a non-empty list for kind 'choice'")
      for i, value in enumerate(self.values):
        _check(isinstance(value, _SCALARS), f"values[{i}]", value,
               "a number, string or boolean (Optuna's categorical choices)")
      return
    _check(self.values is None, "values", self.values,
           f"unset for kind {self.kind!r}, which takes low and high")
    for field in ("low", "high"):
      _check(getattr(self, field) is not None, field, None,
             f"required for kind {self.kind!r}")
    _check(self.low < self.high, "high", self.high,
           f"greater than low = {self.low}")
    if self.kind == "loguniform":
      _check(self.low > 0, "low", self.low, "> 0 for kind 'loguniform'")
    if self.kind == "int":
      for field in ("low", "high"):
        _check(float(getattr(self, field)).is_integer(), field,
               getattr(self, field), "an integer for kind 'int'")

  def points(self) -> list[tuple[str, Any]]:
    """Every option of a 'choice', or the two ends of a range, by field."""
    if self.kind == "choice":
      return [(f"values[{i}]", value) for i, value in enumerate(self.values)]
    cast = int if self.kind == "int" else float
    return [("low", cast(self.low)), ("high", cast(self.high))]

  def suggest(self, trial: optuna.trial.Trial, name: str) -> Any:
    """Draws this hyper-parameter for an Optuna define-by-run trial."""
    if self.kind == "choice":
      return trial.suggest_categorical(name, list(self.values))
    if self.kind == "int":
      return trial.suggest_int(name, int(self.low), int(self.high))
    return trial.suggest_float(
        name, self.low, self.high, log=self.kind == "loguniform")


@dataclasses.dataclass(frozen=True)
class _Condition:
  """A hyper-parameter searched only when its parent's draw enables it."""

  parent: str
  enables: Callable[[Any], bool]
  description: str


@dataclasses.dataclass(frozen=True)
class _Rule:
  """What one hyper-parameter accepts, and where it goes in TrialConfig."""

  section: str  # An attribute of trial.TrialConfig ...
  field: str  # ... and the attribute of that section the value sets.
  kinds: tuple[str, ...]
  accepts: Callable[[Any], bool]
  allowed: str
  condition: _Condition | None = None


def _in_unit_interval(value: Any) -> bool:
  return _is_number(value) and 0 <= value <= 1


def _is_model_name(name: Any) -> bool:
  try:
    models.ModelConfig(name)
  except ConfigError:
    return False
  return True


_FLOAT_KINDS = ("choice", "uniform", "loguniform")
# In search order: a parent comes before the hyper-parameters it enables.
_RULES = {
    "lr": _Rule("optim", "lr", _FLOAT_KINDS,
                lambda v: _is_number(v) and v > 0, "a learning rate > 0"),
    "momentum": _Rule("optim", "momentum", _FLOAT_KINDS, _in_unit_interval,
                      "a number in [0, 1]"),
    "dampening": _Rule(
        "optim", "dampening", _FLOAT_KINDS, _in_unit_interval,
        "a number in [0, 1]",
        # SGD ignores dampening without momentum: no trial is spent on it.
        _Condition("momentum", lambda mu: mu > 0, "momentum > 0")),
    "ema_decay": _Rule("optim", "ema_decay", _FLOAT_KINDS,
                       lambda v: _is_number(v) and 0 <= v < 1,
                       "a number in [0, 1)"),
    "augmentation": _Rule("augment", "family", ("choice",),
                          lambda v: v in augment.FAMILIES,
                          f"one of {list(augment.FAMILIES)}"),
    "augmult": _Rule(
        "augment", "multiplicity", ("choice", "int"),
        lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
        "an integer K >= 1",
        # AugMult averages over K augmentations; 'none' has nothing to average.
        _Condition("augmentation", lambda family: family != "none",
                   "augmentation is not 'none'")),
    "model": _Rule("model", "name", ("choice",), _is_model_name,
                   "'wrn-<depth>-<width>' (depth 6n+4), 'small-cnn' or a timm"
                   " model name"),
}
HYPERPARAMETERS = tuple(_RULES)


@dataclasses.dataclass(frozen=True)
class ReferenceConfig:
  """The reference privacy setting that the search predicts.

  Attributes:
    batch_size: B_ref, the expected batch size (q_ref = B_ref / N).
    noise_multiplier: sigma_ref.
    steps: S_ref.
    delta: defaults to 1 / N.
    target_epsilon: the budget the reference run (and promote) must respect.
    clip_norm: C.
  """

  batch_size: int
  noise_multiplier: float
  steps: int
  delta: float | None = None
  target_epsilon: float | None = None
  clip_norm: float = 1.0

  def __post_init__(self) -> None:
    _check(self.batch_size >= 1, "batch_size", self.batch_size,
           "an integer B_ref >= 1")
    _check(self.noise_multiplier > 0, "noise_multiplier",
           self.noise_multiplier, "a number sigma_ref > 0")
    _check(self.steps >= 1, "steps", self.steps, "an integer S >= 1")
    if self.delta is not None:
      triplet_lib.require_delta(self.delta)
    if self.target_epsilon is not None:
      _check(self.target_epsilon > 0, "target_epsilon", self.target_epsilon,
             "a number > 0")
    _check(self.clip_norm > 0, "clip_norm", self.clip_norm, "a number C > 0")


@dataclasses.dataclass(frozen=True)
class ResourcesConfig:
  """What Ray reserves for each trial.

  Attributes:
    cpu: CPUs per trial.
    gpu: GPUs per trial; a fraction packs several trials on one GPU (0.25:
      four at a time).
    gpu_by_batch_size: GPUs per trial by simulation batch size, for spaces
      whose small batches need less of a GPU than their large ones; a batch
      size not listed takes `gpu`.
  """

  cpu: float = 1.0
  gpu: float = 0.0
  gpu_by_batch_size: dict[int, float] | None = None

  def __post_init__(self) -> None:
    _check(self.cpu > 0, "cpu", self.cpu, "a number > 0")
    _check_gpus("gpu", self.gpu)
    for batch_size, gpu in (self.gpu_by_batch_size or {}).items():
      _check(isinstance(batch_size, int) and batch_size >= 1,
             "gpu_by_batch_size", batch_size, "batch sizes (integers >= 1)"
             " as keys")
      _check_gpus("gpu_by_batch_size", gpu, f" (batch size {batch_size})")

  def gpu_for(self, batch_size: int) -> float:
    """The GPUs a trial at this simulation batch size reserves."""
    return (self.gpu_by_batch_size or {}).get(batch_size, self.gpu)

  def uses_gpus(self) -> bool:
    return self.gpu > 0 or any((self.gpu_by_batch_size or {}).values())


def _check_gpus(field: str, gpu: Any, which: str = "") -> None:
  # Ray only splits a single GPU.
  _check(_is_number(gpu) and (0 <= gpu <= 1 or float(gpu).is_integer()),
         field, gpu, f"a fraction in [0, 1] or a whole number of GPUs{which}")


@dataclasses.dataclass(frozen=True)
class SearchSpace:
  """One search: the reference run, the space, and how to search it.

  Attributes:
    name: the search's name: MLflow experiment and directory name.
    dataset: the private training data; N = its training-set size.
    model: the model of trials that do not search `model`.
    reference: (B_ref, sigma_ref, S_ref), the run the search predicts.
    simulation_batch_sizes: the small batches B <= B_ref trials run at, with
      sigma = sigma_ref B / B_ref; a trial picks one.
    hyperparameters: a distribution per key of `HYPERPARAMETERS`; 'lr' is
      required, others absent keep TrialConfig's defaults.
    steps_grid: numbers of steps S to search at constant eta (section 4.3);
      None keeps S_ref.
    num_trials: how many trials to run.
    metric: which of `METRICS` ranks the trials.
    mode: 'max' or 'min' of the metric.
    scheduler: 'fifo' runs every trial to the end; 'asha' stops poor ones.
    max_concurrent: trials running at once.
    resources: per trial.
    seed: of the sampler and of every trial (trials share common random
      numbers; the promoted run draws its sampling and noise secretly).
    eval_every: a trial evaluates (and reports) every this many steps.
    max_physical_batch: the largest micro-batch; memory, not maths.
    device: 'auto', 'cpu' or 'cuda[:N]'.
    select_on: 'validation' ranks trials on `validation_fraction` of the
      training set held out, so the promoted run's test accuracy is unbiased;
      'test' ranks them on the test split, as the TAN paper did (a warning:
      the reported accuracy is then optimistic).
    validation_fraction: the fraction of the training set held out for
      selection when select_on is 'validation'.
  """

  name: str
  dataset: datasets.DatasetConfig
  model: models.ModelConfig
  reference: ReferenceConfig
  simulation_batch_sizes: tuple[int, ...]
  hyperparameters: dict[str, Distribution]
  steps_grid: tuple[int, ...] | None = None
  num_trials: int = 8
  metric: str = "ema_accuracy"
  mode: Literal["max", "min"] = "max"
  scheduler: Literal["fifo", "asha"] = "fifo"
  max_concurrent: int = 2
  resources: ResourcesConfig = ResourcesConfig()
  seed: int = 0
  eval_every: int = 50
  max_physical_batch: int = 256
  device: str = "auto"
  select_on: Literal["validation", "test"] = "validation"
  validation_fraction: float = DEFAULT_VALIDATION_FRACTION

  def __post_init__(self) -> None:
    _check(bool(_NAME.fullmatch(self.name)), "name", self.name,
           "letters, digits, '.', '_' and '-', starting with a letter or digit")
    _check(bool(self.simulation_batch_sizes), "simulation_batch_sizes",
           self.simulation_batch_sizes, "a non-empty list of batch sizes")
    for i, b in enumerate(self.simulation_batch_sizes):
      _check(1 <= b <= self.reference.batch_size,
             f"simulation_batch_sizes[{i}]", b,
             f"a batch size B in [1, B_ref = {self.reference.batch_size}]")
    if self.steps_grid is not None:
      _check(bool(self.steps_grid), "steps_grid", self.steps_grid,
             "a non-empty list of step counts, or unset")
      for i, steps in enumerate(self.steps_grid):
        _check(steps >= 1, f"steps_grid[{i}]", steps, "an integer S >= 1")
    self._check_hyperparameters()
    _check(self.metric in METRICS, "metric", self.metric,
           f"one of {list(METRICS)}")
    if self.metric == "augtest_accuracy":
      augmentation = self.hyperparameters.get("augmentation")
      # An absent augmentation is TrialConfig's default, 'none'.
      families = ([v for _, v in augmentation.points()] if augmentation
                  else ["none"])
      _check("none" not in families, "metric", self.metric,
             "a metric every trial reports: trials with augmentation 'none'"
             " report no augtest_accuracy")
    for field in ("num_trials", "max_concurrent", "eval_every",
                  "max_physical_batch"):
      _check(getattr(self, field) >= 1, field, getattr(self, field),
             "an integer >= 1")
    _check(self.seed >= 0, "seed", self.seed, "an integer >= 0")
    _check(self.select_on in ("validation", "test"), "select_on",
           self.select_on, "'validation' (default) or 'test'")
    _check(_is_number(self.validation_fraction)
           and 0 < self.validation_fraction < 1, "validation_fraction",
           self.validation_fraction, "a fraction in (0, 1)")
    _check(bool(_DEVICE.fullmatch(self.device)), "device", self.device,
           "'auto', 'cpu' or 'cuda[:N]'")
    for batch_size in self.resources.gpu_by_batch_size or {}:
      _check(batch_size in self.simulation_batch_sizes,
             f"resources.gpu_by_batch_size.{batch_size}", batch_size,
             f"one of simulation_batch_sizes {list(self.simulation_batch_sizes)}")
    # Ray hides every GPU from a trial that reserves none.
    without_gpu = [b for b in self.simulation_batch_sizes
                   if not self.resources.gpu_for(b)]
    _check(not self.device.startswith("cuda") or not without_gpu,
           "device", self.device,
           f"'auto' or 'cpu' while trials at B = {without_gpu} reserve no GPU"
           " (resources.gpu, resources.gpu_by_batch_size); reserve one for"
           " cuda")

  def _check_hyperparameters(self) -> None:
    for key in self.hyperparameters:
      _check(key in _RULES, f"hyperparameters.{key}", key,
             f"unknown hyper-parameter; allowed: {', '.join(HYPERPARAMETERS)}")
    _check("lr" in self.hyperparameters, "hyperparameters.lr", None,
           "required: the learning rate has no default")
    # In _RULES' order, so that a parent is valid before its condition runs.
    for key, rule in _RULES.items():
      distribution = self.hyperparameters.get(key)
      if distribution is None:
        continue
      field = f"hyperparameters.{key}"
      _check(distribution.kind in rule.kinds, f"{field}.kind",
             distribution.kind, f"one of {list(rule.kinds)} for {key}")
      points = distribution.points()
      for suffix, value in points:
        _check(rule.accepts(value), f"{field}.{suffix}", value, rule.allowed)
      condition = rule.condition
      if condition:
        parent = self.hyperparameters.get(condition.parent)
        _check(
            parent is not None
            and any(condition.enables(v) for _, v in parent.points()),
            field, [v for _, v in points],
            f"searched only when {condition.description}; give"
            f" hyperparameters.{condition.parent} such a value")


def load_search_space(path: str | pathlib.Path) -> SearchSpace:
  """Reads and validates a search file.

  Files of in-memory datasets (digits, synthetic) are also checked against
  their N; the driver checks the others with `check_against_dataset` once the
  data is loaded, so a file validates without its data.

  Raises:
    ConfigError: naming the dotted field at fault.
  """
  space = config_io.from_dict(SearchSpace, config_io.load_yaml(path))
  if space.dataset.name in _IN_MEMORY_DATASETS:
    check_against_dataset(
        space, datasets.load_dataset(space.dataset).num_train)
  return space


def reference_triplet(
    space: SearchSpace, dataset_size: int
) -> triplet_lib.PrivacyTriplet:
  """(N, B_ref, sigma_ref, S): the run the search predicts and promote runs."""
  reference = space.reference
  _check(reference.batch_size <= dataset_size, "reference.batch_size",
         reference.batch_size,
         f"at most the training-set size N = {dataset_size} of"
         f" {space.dataset.name}")
  return triplet_lib.PrivacyTriplet(
      dataset_size, reference.batch_size, reference.noise_multiplier,
      reference.steps)


def check_against_dataset(space: SearchSpace, dataset_size: int) -> None:
  """The checks that need N: B_ref <= N, delta <= 1/N, steps_grid, the budget.

  The budget is checked with RDP, the paper's accountant and the loosest of
  `accounting.ACCOUNTANTS`: a reference within it is within it for all.

  Raises:
    ConfigError: naming the field at fault.
  """
  reference = reference_triplet(space, dataset_size)
  triplet_lib.require_private_delta("reference.delta", space.reference.delta,
                                    dataset_size)
  if space.steps_grid:
    # Raises when an S needs B_ref sqrt(S_ref / S) > N.
    triplet_lib.constant_eta_triplets(reference, space.steps_grid)
  target = space.reference.target_epsilon
  if target is not None:
    delta = space.reference.delta or accounting.default_delta(dataset_size)
    spent = accounting.epsilon(reference, delta).epsilon
    _check(spent <= target, "reference.target_epsilon", target,
           f"at least the reference run's eps = {spent:.4f} (RDP, delta ="
           f" {delta:.3g}); raise reference.noise_multiplier (`tan-tune"
           f" privacy --target-epsilon` calibrates it)")


def define_by_run(
    space: SearchSpace,
) -> Callable[[optuna.trial.Trial], dict[str, Any]]:
  """The space as an Optuna define-by-run function, for OptunaSearch.

  Suggests every hyper-parameter of the file under its key, skipping those
  whose condition fails (dampening when momentum = 0, augmult when
  augmentation = 'none'), then `simulation_batch_size` (a constant when there
  is one) and `steps` (only with a steps_grid).

  Returns:
    A function of an Optuna trial that returns the constants of the trial.
  """

  def suggest(trial: optuna.trial.Trial) -> dict[str, Any]:
    suggested = {}
    for key, rule in _RULES.items():
      distribution = space.hyperparameters.get(key)
      condition = rule.condition
      if distribution is None or (
          condition and not condition.enables(suggested[condition.parent])):
        continue
      suggested[key] = distribution.suggest(trial, key)
    constants = {}
    batch_sizes = space.simulation_batch_sizes
    if len(batch_sizes) > 1:
      trial.suggest_categorical(SIMULATION_BATCH_SIZE, list(batch_sizes))
    else:
      constants[SIMULATION_BATCH_SIZE] = batch_sizes[0]
    if space.steps_grid:
      trial.suggest_categorical(STEPS, list(space.steps_grid))
    return constants

  return suggest


def _triplet_info(triplet: triplet_lib.PrivacyTriplet) -> dict[str, Any]:
  return {
      "batch_size": triplet.batch_size,
      "noise_multiplier": triplet.noise_multiplier,
      "steps": triplet.steps,
  }


def trial_config(
    space: SearchSpace, params: dict[str, Any], dataset_size: int
) -> tuple[trial_lib.TrialConfig, dict[str, Any]]:
  """The run of one trial, at its simulated triplet.

  The run's reference is (B_ref, sigma_ref, S_ref), or with params['steps'] =
  S its constant-eta alternative (B_ref sqrt(S_ref / S), sigma_ref, S) with
  lr x S_ref / S. The trial simulates it at the batch params[
  'simulation_batch_size'] gives for B_ref, scaled alike: B = B_sim * B'_ref /
  B_ref, sigma = sigma_ref * B / B'_ref, same S (table 3).

  Args:
    space: the search space.
    params: a trial's hyper-parameters and constants, as `define_by_run`
      produced them; hyper-parameters absent keep TrialConfig's defaults.
    dataset_size: N.

  Returns:
    The TrialConfig, and JSON-ready facts about it: the simulated and
    reference triplets, eta, eta_step, lr_scale and compute_saving.

  Raises:
    ConfigError: params has an unknown key, or does not fit the space.
  """
  for key in params:
    _check(key in _RULES or key in (SIMULATION_BATCH_SIZE, STEPS),
           f"params.{key}", params[key],
           f"unknown parameter; allowed: {', '.join(HYPERPARAMETERS)},"
           f" {SIMULATION_BATCH_SIZE}, {STEPS}")
  for key in ("lr", SIMULATION_BATCH_SIZE):
    _check(key in params, f"params.{key}", None, "required")
  reference = reference_triplet(space, dataset_size)
  simulated_reference = triplet_lib.simulate(
      reference, params[SIMULATION_BATCH_SIZE])
  alternative = triplet_lib.ConstantEtaTriplet(reference, lr_scale=1.0)
  if STEPS in params:
    alternative = triplet_lib.constant_eta_triplets(
        reference, [params[STEPS]])[0]
  simulated = triplet_lib.simulate_alternative(
      alternative, reference, simulated_reference).triplet
  run_reference = alternative.triplet
  config = trial_lib.TrialConfig(
      dataset=space.dataset,
      model=space.model,
      privacy=trial_lib.PrivacyConfig(
          batch_size=simulated.batch_size,
          noise_multiplier=simulated.noise_multiplier,
          steps=simulated.steps,
          clip_norm=space.reference.clip_norm,
          reference_batch_size=run_reference.batch_size,
          delta=space.reference.delta,
      ),
      max_physical_batch=space.max_physical_batch,
      eval_every=space.eval_every,
      seed=space.seed,
      device=space.device,
      validation_fraction=(
          space.validation_fraction if space.select_on == "validation"
          else 0.0),
  )
  sections = collections.defaultdict(dict)
  for key, rule in _RULES.items():
    if key in params:
      sections[rule.section][rule.field] = params[key]
  sections["optim"]["lr"] = params["lr"] * alternative.lr_scale
  config = dataclasses.replace(config, **{
      section: dataclasses.replace(getattr(config, section), **fields)
      for section, fields in sections.items()
  })
  info = {
      "dataset_size": dataset_size,
      "simulated": _triplet_info(simulated),
      "reference": _triplet_info(run_reference),
      "eta": run_reference.eta,
      "eta_step": run_reference.eta_step,
      "lr_scale": alternative.lr_scale,
      "compute_saving": triplet_lib.compute_saving(run_reference, simulated),
  }
  return config, info
