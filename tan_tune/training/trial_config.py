"""What one run is: the frozen configuration `trial.run_trial` trains.

`TrialConfig` gathers the dataset, the model, the privacy triplet minus N
(B, sigma, S, C and how batches are sampled), the optimiser and the
augmentation; each class checks its own fields and names the one at fault.
The classes live apart from the code that runs them, so that the run's parts
(`run_state.py`, `trial.py`) import them without importing each other.
"""

import dataclasses
import hashlib
import json
import math
from typing import Any

from tan_tune import config_io
from tan_tune.errors import ConfigError
from tan_tune.privacy import clipping_bound
from tan_tune.privacy import sampling_scheme
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.training import augment as augment_lib
from tan_tune.training import canaries as canaries_lib
from tan_tune.training import datasets
from tan_tune.training import models
from tan_tune.training import private_score
from tan_tune.training import clipping as clipping_lib

CLIPPING = clipping_lib.NAMES
# Where a run trains and how it splits its batches into micro-batches: what
# changes none of its outputs, and so none of what its charge pays for.
_NOT_CHARGED = ("device", "max_physical_batch")
# A private run reports at most about this many evaluations: each is a
# look at the data, and a fine grid of report times times its steps.
MAX_PRIVATE_EVALUATIONS = 100


def private_eval_every(steps: int, eval_every: int) -> int:
  """`eval_every`, raised so that S steps report at most
  MAX_PRIVATE_EVALUATIONS evaluations (and the last)."""
  return max(eval_every, math.ceil(steps / MAX_PRIVATE_EVALUATIONS))


@dataclasses.dataclass(frozen=True)
class PrivacyConfig:
  """The privacy triplet of the run, minus N (the dataset gives it).

  Attributes:
    batch_size: B, the expected logical batch size (q = B / N).
    noise_multiplier: sigma; ignored when `private` is False.
    steps: S, the number of logical steps.
    clip_norm: C, the per-example gradient norm bound.
    private: False trains plain SGD (no clipping, no noise) as a baseline.
    reference_batch_size: B_ref when this run simulates a reference run at a
      larger batch; None when it is the run itself.
    delta: in (0, 1); unset (None) is 1 / N, and a private run refuses more
      (`triplet.require_private_delta`).
    sampling: how batches are drawn: a registered sampler's name,
      'poisson', 'truncated-poisson', 'fixed', 'fixed-with-replacement' or
      your own (`privacy/samplers.py`).
    adjacency: 'add/remove-one' or 'replace-one': what epsilon is for.
    truncation_stds: truncated-poisson's cap is B + truncation_stds sqrt(B).
    jl_projections: r, with TrialConfig.clipping 'jl': norms are estimated
      from r random projections, which changes the accountant (`pld-jl`).
  """

  batch_size: int
  noise_multiplier: float
  steps: int
  clip_norm: float = 1.0
  private: bool = True
  reference_batch_size: int | None = None
  delta: float | None = None
  sampling: str = "poisson"
  adjacency: str = sampling_scheme.ADD_REMOVE
  truncation_stds: float = sampling_scheme.DEFAULT_TRUNCATION_STDS
  jl_projections: int | None = None

  def __post_init__(self):
    _ = self.scheme  # Validates sampling, adjacency, truncation_stds and r.
    if self.delta is not None:
      # Where the file is read, so that no run is charged at a delta no
      # accountant takes; above 1/N needs N (`run_state.check_fits`).
      triplet_lib.require_delta(self.delta)
    if self.clip_norm <= 0 or not math.isfinite(self.clip_norm):
      raise ConfigError("clip_norm", self.clip_norm, "expected a number > 0")
    if self.private and not self.noise_multiplier > 0:
      raise ConfigError(
          "noise_multiplier",
          self.noise_multiplier,
          "a private run needs sigma > 0 (set private: false for a baseline)",
      )
    if self.reference_batch_size is not None and (
        self.reference_batch_size < self.batch_size
    ):
      raise ConfigError(
          "reference_batch_size",
          self.reference_batch_size,
          f"a simulation's B_ref must be at least its B = {self.batch_size}",
      )

  @property
  def scheme(self) -> sampling_scheme.SamplingScheme:
    return sampling_scheme.SamplingScheme(
        self.sampling, self.adjacency, self.truncation_stds,
        clipping_bound.from_projections(self.jl_projections))

  @property
  def simulated(self) -> bool:
    """A trial standing for a reference run: never accounted."""
    return self.reference_batch_size is not None

  @property
  def claims_privacy(self) -> bool:
    """DP-SGD and not a simulation: the accountant covers what it publishes."""
    return self.private and not self.simulated


@dataclasses.dataclass(frozen=True)
class OptimConfig:
  """SGD on the privatised gradient, with a constant learning rate.

  Attributes:
    lr: the learning rate.
    momentum: mu in the paper's grid.
    dampening: d in the paper's grid.
    ema_decay: the EMA decay; None evaluates the raw weights only.
  """

  lr: float = 1.0
  momentum: float = 0.0
  dampening: float = 0.0
  ema_decay: float | None = 0.999

  def __post_init__(self):
    if not self.lr > 0:
      raise ConfigError("lr", self.lr, "expected a number > 0")
    for field in ("momentum", "dampening"):
      if not 0 <= getattr(self, field) <= 1:
        raise ConfigError(field, getattr(self, field), "expected [0, 1]")
    if self.ema_decay is not None and not 0 <= self.ema_decay < 1:
      raise ConfigError("ema_decay", self.ema_decay, "expected [0, 1)")


@dataclasses.dataclass(frozen=True)
class TrialConfig:
  """Everything one run needs.

  Attributes:
    dataset: which data; N = its training-set size.
    model: which network.
    privacy: B, sigma, S, C.
    optim: lr, momentum, dampening, EMA.
    augment: the augmentation family and AugMult order K.
    max_physical_batch: the largest micro-batch of examples (each with its K
      copies) put through the model at once; memory, not maths.
    eval_every: evaluate and report every this many steps (and at the end).
    seed: seeds initialisation and augmentation; in simulations and
      non-private runs also sampling, noise and dropout, which a private run
      draws from the OS's secret source instead.
    device: 'cpu', 'cuda', 'cuda:1', or 'auto' (a GPU when there is one).
    validation_fraction: above 0, this fraction of the training set is held
      out and evaluated on instead of the test split (search trials); 0
      trains on the whole training set and evaluates on test.
    clipping: 'fast' computes clipped sums without per-sample gradients
      (`fast_clipping`), 'vmap' from per-sample gradients; 'auto' is 'fast'
      when its layers cover the model, else 'vmap', said once in the log.
      'jl' clips with norms estimated from privacy.jl_projections random
      projections (`jl_clipping`): any model, another accountant.
    canaries: an audited run's canaries (`canaries.py`); None otherwise.
    score: a private search's trial: trains on part of the training set
      and releases only a DP score on the rest (`private_score.py`);
      None otherwise.
  """

  dataset: datasets.DatasetConfig
  model: models.ModelConfig
  privacy: PrivacyConfig
  optim: OptimConfig = OptimConfig()
  augment: augment_lib.AugmentConfig = augment_lib.AugmentConfig("none")
  max_physical_batch: int = 256
  eval_every: int = 100
  seed: int = 0
  device: str = "auto"
  validation_fraction: float = 0.0
  clipping: str = "auto"
  canaries: canaries_lib.CanaryConfig | None = None
  score: private_score.PrivateScore | None = None

  def __post_init__(self):
    for field in ("max_physical_batch", "eval_every"):
      if getattr(self, field) < 1:
        raise ConfigError(field, getattr(self, field), "expected an integer >= 1")
    if self.clipping not in CLIPPING:
      raise ConfigError("clipping", self.clipping, f"one of {list(CLIPPING)}")
    bounded = private_eval_every(self.privacy.steps, self.eval_every)
    if self.privacy.claims_privacy and self.eval_every < bounded:
      raise ConfigError(
          "eval_every", self.eval_every,
          f"at least {bounded} = ceil(S / {MAX_PRIVATE_EVALUATIONS}) in a"
          f" private run, which reports at most {MAX_PRIVATE_EVALUATIONS}"
          " evaluations")
    if (clipping_lib.estimates(self.clipping)
        != (self.privacy.jl_projections is not None)):
      raise ConfigError(
          "privacy.jl_projections", self.privacy.jl_projections,
          "an integer r >= 1 with clipping 'jl', and unset otherwise")
    if not 0 <= self.validation_fraction < 1:
      raise ConfigError("validation_fraction", self.validation_fraction,
                        "a fraction in [0, 1); 0 evaluates on the test split")
    if self.canaries and not self.privacy.claims_privacy:
      raise ConfigError(
          "canaries", "set",
          "only in a private run (DP-SGD, not a simulation): an audit tests"
          " the guarantee the run claims")
    if (self.canaries and self.canaries.base == canaries_lib.PRIVATE
        and not self.privacy.scheme.sampler.independent_membership):
      raise ConfigError(
          "canaries.base", self.canaries.base,
          f"'public' with {self.privacy.sampling} sampling: it draws B of"
          " the rows present, so on private data its rate would reveal how"
          " many canaries are in")
    if self.score and not (self.privacy.claims_privacy and not self.canaries
                           and self.privacy.scheme.sampler
                           .independent_membership):
      raise ConfigError(
          "score", "set",
          "only in a private run, not audited, whose examples join batches"
          " independently (Poisson): its training part is sampled at the"
          " whole training set's rate")
    if self.validation_fraction and self.privacy.claims_privacy:
      raise ConfigError(
          "validation_fraction", self.validation_fraction,
          "0 for a private run, which trains on the whole training set and"
          " reports test accuracy")


def charged(config: TrialConfig) -> dict[str, Any]:
  """What a private run's charge pays for, as plain data: every field but
  `_NOT_CHARGED`. A resumed run with any other field edited is refused:
  restoring the optimiser's state would keep the old lr and momentum, and
  another clip norm or augmentation would release a second model on one
  charge."""
  fields = {key: value for key, value in config_io.to_dict(config).items()
            if key not in _NOT_CHARGED}
  return json.loads(json.dumps(fields, default=str))


def charged_digest(config: TrialConfig) -> str:
  """SHA-256 of `charged(config)`: what a ledger entry records of it."""
  text = json.dumps(charged(config), sort_keys=True)
  return hashlib.sha256(text.encode()).hexdigest()


def edits(paid: dict[str, Any], config: TrialConfig) -> list[str]:
  """The fields of `config` that differ from `paid` (an earlier
  `charged`), as 'field: now (paid for: before)', dotted and sorted."""
  now = config_io.flatten(charged(config))
  before = config_io.flatten(paid)
  return [f"{key}: {now.get(key)} (paid for: {before.get(key)})"
          for key in sorted(set(now) | set(before))
          if now.get(key) != before.get(key)]
