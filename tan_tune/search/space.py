"""The search file's schema: the reference run, the space, how to search it.

A search file names a reference run (B_ref, sigma_ref, S) on N examples, the
run whose accuracy the search predicts and which `promote` finally trains
privately, the distributions of the non-privacy hyper-parameters
(`hyperparameters.py`), and how to search them. Every trial runs at a small
batch B with

    sigma = sigma_ref * B / B_ref,   same S,

which keeps eta_step = q / (sqrt(2) sigma), hence predicts the reference run
at B_ref / B times less compute (section 3.4); `trials.py` builds each
trial's run.

Files are read with `config_io`, so every mistake is a `ConfigError` naming
the dotted field (e.g. 'hyperparameters.momentum.values[2]'). Checks that need
N live in `resolved.resolve`, so that a file validates without its data.
"""

import dataclasses
import operator
import pathlib
import re
from typing import Literal

from tan_tune import config_io
from tan_tune.errors import ConfigError
from tan_tune.privacy import clipping_bound
from tan_tune.privacy import sampling_scheme
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.privacy.trial_count import TrialCount
from tan_tune.privacy import tuning
from tan_tune.search import compute
from tan_tune.search import schedulers
from tan_tune.search import search_algorithms
from tan_tune.search import tuning_mode
from tan_tune.search.hyperparameters import check
from tan_tune.search.hyperparameters import Distribution
from tan_tune.search.hyperparameters import HYPERPARAMETERS
from tan_tune.search.hyperparameters import is_number
from tan_tune.search.hyperparameters import RULES
from tan_tune.search.hyperparameters import said
from tan_tune.search.resources import ResourcesConfig
from tan_tune.training import clipping as clipping_lib
from tan_tune.training import datasets
from tan_tune.training import model_families
from tan_tune.training import models
from tan_tune.training import scatternet
from tan_tune.training import trial_config

# The trial metrics a search may rank by (`trial.run_trial` reports them).
METRICS = ("accuracy", "ema_accuracy", "augtest_accuracy")
# Held out of the training set to rank trials on, unless select_on is 'test'.
DEFAULT_VALIDATION_FRACTION = 0.1
SELECT_ON_TEST_WARNING = (
    "select_on: test ranks trials on the test split (the TAN paper's"
    " practice): the promoted run's test accuracy is then optimistic")
# Also a directory name for the driver: one path component.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# What `trial.run_trial` accepts.
_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")


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
    sampling: how every run of the search draws batches: 'poisson'
      (default), 'truncated-poisson', 'fixed' or 'fixed-with-replacement'
      (`privacy/sampling_scheme.py`); each has its own accountant.
    adjacency: what the guarantee is for: 'add/remove-one' (default) or
      'replace-one' (fixed and Poisson samplers).
    truncation_stds: truncated-poisson's cap is B + truncation_stds sqrt(B).
  """

  batch_size: int
  noise_multiplier: float
  steps: int
  delta: float | None = None
  target_epsilon: float | None = None
  clip_norm: float = 1.0
  sampling: str = "poisson"
  adjacency: str = sampling_scheme.ADD_REMOVE
  truncation_stds: float = sampling_scheme.DEFAULT_TRUNCATION_STDS

  def __post_init__(self) -> None:
    _ = self.scheme  # Validates sampling, adjacency and truncation_stds.
    check(self.batch_size >= 1, "batch_size", self.batch_size,
           "an integer B_ref >= 1")
    check(self.noise_multiplier > 0, "noise_multiplier",
           self.noise_multiplier, "a number sigma_ref > 0")
    check(self.steps >= 1, "steps", self.steps, "an integer S >= 1")
    if self.delta is not None:
      triplet_lib.require_delta(self.delta)
    if self.target_epsilon is not None:
      check(self.target_epsilon > 0, "target_epsilon", self.target_epsilon,
             "a number > 0")
    check(self.clip_norm > 0, "clip_norm", self.clip_norm, "a number C > 0")

  @property
  def scheme(self) -> sampling_scheme.SamplingScheme:
    return sampling_scheme.SamplingScheme(self.sampling, self.adjacency,
                                          self.truncation_stds)


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
    scheduler: 'fifo' runs every trial to the end; 'asha' stops poor ones
      (`schedulers.py`).
    max_concurrent: trials running at once.
    resources: per trial.
    seed: of the search algorithm and of every trial (trials share common
      random numbers; the promoted run draws its sampling and noise
      secretly).
    eval_every: a trial evaluates (and reports) every this many steps.
    max_physical_batch: the largest micro-batch; memory, not maths.
    clipping: 'auto' (fast clipping where it covers the model, else per-sample
      gradients by vmap), 'fast' or 'vmap'; all give the same clipped sums.
      'jl' estimates norms from r random projections (any model, no
      per-example gradient; accounted by `pld-jl`, Poisson add/remove only).
    jl_projections: r for clipping 'jl', unless hyperparameters.jl_projections
      searches it.
    device: 'auto', 'cpu' or 'cuda[:N]'.
    select_on: 'validation' ranks trials on `validation_fraction` of the
      training set held out, so the promoted run's test accuracy is unbiased;
      'test' ranks them on the test split, as the TAN paper did (a warning:
      the reported accuracy is then optimistic).
    validation_fraction: the fraction of the training set held out for
      selection when select_on is 'validation'.
    score_noise: in a private random search selecting on validation, the
      standard deviation s of the Gaussian noise added to each trial's
      count of correct validation predictions (`private_score.py`).
    tuning_privacy: the strategy that runs and accounts the search
      (`tuning_mode.py`, `modes.py`): 'non_private' (TAN's practice),
      'public_data' or 'private_random_search'.
    public_dataset: with 'public_data', the public data trials run on.
    trial_count: with 'private_random_search', the distribution of the
      number of trials, drawn secretly (replaces num_trials).
    search_algorithm: how Optuna proposes hyper-parameters, 'tpe' (default)
      or 'random' (`search_algorithms.py`); the file's key is `sampler`.
    compute_budget: the most compute C = B'_ref S K a candidate reference
      run may take (`compute.py`); the steps_grid's S that exceed it are
      not proposed.
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
  scheduler: str = "fifo"
  max_concurrent: int = 2
  resources: ResourcesConfig = ResourcesConfig()
  seed: int = 0
  eval_every: int = 50
  max_physical_batch: int = 256
  clipping: str = "auto"
  jl_projections: int | None = None
  device: str = "auto"
  select_on: Literal["validation", "test"] = "validation"
  validation_fraction: float = DEFAULT_VALIDATION_FRACTION
  score_noise: float | None = None
  tuning_privacy: str = "non_private"
  public_dataset: datasets.DatasetConfig | None = None
  trial_count: TrialCount | None = None
  search_algorithm: str = dataclasses.field(default="tpe",
                                            metadata={"key": "sampler"})
  compute_budget: compute.ComputeBudget | None = None

  def __post_init__(self) -> None:
    schedulers.named(self.scheduler)
    check(bool(_NAME.fullmatch(self.name)), "name", self.name,
           "letters, digits, '.', '_' and '-', starting with a letter or digit")
    check(bool(self.simulation_batch_sizes), "simulation_batch_sizes",
           self.simulation_batch_sizes, "a non-empty list of batch sizes")
    for i, b in enumerate(self.simulation_batch_sizes):
      check(1 <= b <= self.reference.batch_size,
             f"simulation_batch_sizes[{i}]", b,
             f"a batch size B in [1, B_ref = {self.reference.batch_size}]")
    if self.steps_grid is not None:
      check(bool(self.steps_grid), "steps_grid", self.steps_grid,
             "a non-empty list of step counts, or unset")
      for i, steps in enumerate(self.steps_grid):
        check(steps >= 1, f"steps_grid[{i}]", steps, "an integer S >= 1")
    self._check_hyperparameters()
    self.proposed_steps()  # A budget that nothing fits fails here.
    check(self.metric in METRICS, "metric", self.metric,
           f"one of {list(METRICS)}")
    if self.metric == "augtest_accuracy":
      check("none" not in self.augmentation_families(), "metric", self.metric,
             "a metric every trial reports: trials with augmentation 'none'"
             " report no augtest_accuracy")
    for field in ("num_trials", "max_concurrent", "eval_every",
                  "max_physical_batch"):
      check(getattr(self, field) >= 1, field, getattr(self, field),
             "an integer >= 1")
    check(self.seed >= 0, "seed", self.seed, "an integer >= 0")
    check(self.clipping in trial_config.CLIPPING, "clipping", self.clipping,
           f"one of {list(trial_config.CLIPPING)}")
    self._check_jl_projections()
    check(self.select_on in ("validation", "test"), "select_on",
           self.select_on, "'validation' (default) or 'test'")
    check(is_number(self.validation_fraction)
           and 0 < self.validation_fraction < 1, "validation_fraction",
           self.validation_fraction, "a fraction in (0, 1)")
    check(self.score_noise is None
          or (is_number(self.score_noise) and self.score_noise > 0),
          "score_noise", self.score_noise,
          "a standard deviation s > 0 (in a private random search), or unset")
    check(bool(_DEVICE.fullmatch(self.device)), "device", self.device,
           "'auto', 'cpu' or 'cuda[:N]'")
    for batch_size in self.resources.gpu_by_batch_size or {}:
      check(batch_size in self.simulation_batch_sizes,
             f"resources.gpu_by_batch_size.{batch_size}", batch_size,
             f"one of simulation_batch_sizes {list(self.simulation_batch_sizes)}")
    # Ray hides every GPU from a trial that reserves none.
    without_gpu = [b for b in self.simulation_batch_sizes
                   if not self.resources.gpu_for(b)]
    check(not self.device.startswith("cuda") or not without_gpu,
           "device", self.device,
           f"'auto' or 'cpu' while trials at B = {without_gpu} reserve no GPU"
           " (resources.gpu, resources.gpu_by_batch_size); reserve one for"
           " cuda")
    strategy = tuning_mode.named(self.tuning_privacy)
    search_algorithms.named(self.search_algorithm)
    strategy.check_space(self)

  @property
  def trial_dataset(self) -> datasets.DatasetConfig:
    """The data trials train on: public_dataset when declared public."""
    return self.public_dataset or self.dataset

  @property
  def projection_choices(self) -> tuple[int | None, ...]:
    """The r a trial may use, ascending (None: exact clipping).

    A searched range gives its ends: eps falls as r grows, so the ends bound
    every r between them.
    """
    searched = self.hyperparameters.get("jl_projections")
    if searched is not None:
      return tuple(sorted({int(v) for _, v in searched.points()}))
    return (self.jl_projections,)

  def reference_schemes(self) -> tuple[sampling_scheme.SamplingScheme, ...]:
    """The reference run's scheme at each of `projection_choices`; the first
    spends the most."""
    reference = self.reference
    return tuple(
        sampling_scheme.SamplingScheme(reference.sampling, reference.adjacency,
                                       reference.truncation_stds,
                                       clipping_bound.from_projections(r))
        for r in self.projection_choices)

  def _check_jl_projections(self) -> None:
    searched = "jl_projections" in self.hyperparameters
    if not clipping_lib.estimates(self.clipping):
      check(self.jl_projections is None, "jl_projections",
             self.jl_projections, "unset unless clipping is 'jl'")
      check(not searched, "hyperparameters.jl_projections", self.clipping,
             "searched only when clipping is 'jl'")
      return
    check(searched != (self.jl_projections is not None), "jl_projections",
           self.jl_projections,
           "an integer r >= 1 with clipping 'jl', or searched in"
           " hyperparameters.jl_projections (one of the two)")
    try:
      self.reference_schemes()  # JL needs Poisson add/remove; r >= 1.
    except ConfigError as error:
      field = ("jl_projections" if error.field == "jl_projections"
               else "reference.sampling")
      raise ConfigError(field, error.value, error.allowed) from None

  def proposed_steps(self) -> tuple[int, ...] | None:
    """The steps_grid trials draw S from: all of it, or what fits the
    compute budget; None keeps S_ref."""
    if self.compute_budget is None:
      return self.steps_grid
    augmult = self.hyperparameters.get("augmult")
    largest_k = max(v for _, v in augmult.points()) if augmult else 1
    fitting = compute.affordable_steps(
        self.compute_budget, self.reference.batch_size, self.reference.steps,
        self.steps_grid or (self.reference.steps,), largest_k)
    return fitting if self.steps_grid else None

  def augmentation_families(self) -> list[str]:
    """The families trials may draw; absent is TrialConfig's 'none'."""
    augmentation = self.hyperparameters.get("augmentation")
    return ([v for _, v in augmentation.points()] if augmentation
            else ["none"])

  def networks(self) -> list[models.ModelConfig]:
    """The models trials may train (`model` and its `scales` searched, or
    the fixed ones)."""
    names, scales = (self.hyperparameters.get(key) for key in ("model",
                                                               "scales"))
    drawn = ([dataclasses.replace(self.model, name=name)
              for _, name in names.points()] if names else [self.model])
    if not scales:
      return drawn
    return [model for model in drawn
            if not model_families.takes(model.name, "scales")] + [
                dataclasses.replace(model, scales=value) for model in drawn
                if model_families.takes(model.name, "scales")
                for _, value in scales.points()]

  def _check_hyperparameters(self) -> None:
    for key in self.hyperparameters:
      check(key in RULES, f"hyperparameters.{key}", key,
             f"unknown hyper-parameter; allowed: {', '.join(HYPERPARAMETERS)}")
    check("lr" in self.hyperparameters, "hyperparameters.lr", None,
           "required: the learning rate has no default")
    # In RULES' order, so that a parent is valid before its condition runs.
    for key, rule in RULES.items():
      distribution = self.hyperparameters.get(key)
      if distribution is None:
        continue
      field = f"hyperparameters.{key}"
      check(distribution.kind in rule.kinds, f"{field}.kind",
             distribution.kind, f"one of {list(rule.kinds)} for {key}")
      points = distribution.points()
      for suffix, value in points:
        check(rule.accepts(value), f"{field}.{suffix}", value,
              said(rule.allowed))
      condition = rule.condition
      if condition:
        parent = self.hyperparameters.get(condition.parent)
        if parent is None and condition.fixed:  # Every trial's, so enabling.
          value = operator.attrgetter(condition.fixed)(self)
          check(condition.enables(value), field, value,
                 f"searched only when {said(condition.description)}")
          continue
        check(
            parent is not None
            and any(condition.enables(v) for _, v in parent.points()),
            field, [v for _, v in points],
            f"searched only when {said(condition.description)}; give"
            f" hyperparameters.{condition.parent} such a value")
    names = self.hyperparameters.get("model")
    # Every trial's model keeps the file's fields but the name.
    for field, default in (("width", 1), ("scales", scatternet.SCALES)):
      value = getattr(self.model, field)
      for _, name in (names.points() if names and value != default else ()):
        check(model_families.takes(name, field), f"model.{field}", value,
               f"{default} when hyperparameters.model offers {name!r}, which"
               f" takes no {field}; search hyperparameters.{field} instead")


def load_search_space(path: str | pathlib.Path) -> SearchSpace:
  """Reads and validates a search file, without its data (`resolved.py`
  checks it against N).

  Raises:
    ConfigError: naming the dotted field at fault.
  """
  return config_io.from_dict(SearchSpace, config_io.load_yaml(path))
