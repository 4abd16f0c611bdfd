"""One DP-SGD training run with the TAN paper's recipe, without Ray.

`run_trial` trains for exactly S logical steps of Poisson-sampled batches with
DP-SGD and augmentation multiplicity (`dp_sgd.py`), an EMA of the weights
(`ema.py`), and evaluates the raw weights, the EMA weights and AugTest (a
majority vote over K training augmentations of each test image, section 4.2).
Search trials, `tan-tune train` and the promoted reference run all call it.

A run is a simulation when it names a reference batch size B_ref (even
B_ref = B: a search trial is never accounted): its sigma then stands for
sigma_ref = sigma B_ref / B at the same S. Its own epsilon is reported with
`private: False`, beside the epsilon the reference run would spend; only the
latter is ever a number to quote. A simulation may evaluate on a validation
split held out of the training set (`validation_fraction`), which is what a
search selects on.

A private run (DP-SGD, not a simulation) is the one whose outputs the
accountant covers, so it publishes nothing else: its reports hold the step,
held-out accuracies and epsilon (`PRIVATE_METRICS`), never the training loss,
the clip fraction, realised batch sizes or throughput, and its sampling and
noise are seeded from the OS's secret source (`seeds.py`).

Sampling and noise draw from generators whose states are checkpointed;
augmentation and dropout are reseeded at every step from (seed, step, rank).
A run stopped at step s and resumed ends with the same weights as one that was
never stopped. Checkpoints are written owner-only: a private run's hold its
secret generator states.

The same function trains the promoted run data-parallel (`promote_worker.py`):
with `world_size` workers, each draws the same Poisson batch (same sampling
seed), takes every `world_size`-th example of it from position `rank`, and
`dp_sgd.DPSGD` all-reduces the clipped sums before the noise every worker adds
alike. Only rank 0 evaluates and checkpoints; every rank resumes from its
checkpoint.
"""

import copy
import dataclasses
import math
import os
import pathlib
import time
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from tan_tune import accounting
from tan_tune import augment as augment_lib
from tan_tune import datasets
from tan_tune import dp_sgd
from tan_tune import ema as ema_lib
from tan_tune import models
from tan_tune import sampling
from tan_tune import seeds as seeds_lib
from tan_tune import triplet as triplet_lib
from tan_tune.errors import ConfigError

CHECKPOINT_FILE = "checkpoint.pt"
# All a private run reports at an evaluation: DP outputs and their accounting.
PRIVATE_METRICS = ("step", "accuracy", "ema_accuracy", "augtest_accuracy",
                   "epsilon", "accountant", "private", "simulated",
                   "evaluated_on")


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
    delta: defaults to 1 / N; a private run refuses more.
  """

  batch_size: int
  noise_multiplier: float
  steps: int
  clip_norm: float = 1.0
  private: bool = True
  reference_batch_size: int | None = None
  delta: float | None = None

  def __post_init__(self):
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
    seed: seeds initialisation, augmentation and dropout; in simulations and
      non-private runs also sampling and noise, which a private run draws
      from the OS's secret source instead.
    device: 'cpu', 'cuda', 'cuda:1', or 'auto' (a GPU when there is one).
    validation_fraction: above 0, this fraction of the training set is held
      out and evaluated on instead of the test split (search trials); 0
      trains on the whole training set and evaluates on test.
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

  def __post_init__(self):
    for field in ("max_physical_batch", "eval_every"):
      if getattr(self, field) < 1:
        raise ConfigError(field, getattr(self, field), "expected an integer >= 1")
    if not 0 <= self.validation_fraction < 1:
      raise ConfigError("validation_fraction", self.validation_fraction,
                        "a fraction in [0, 1); 0 evaluates on the test split")
    if self.validation_fraction and self.privacy.claims_privacy:
      raise ConfigError(
          "validation_fraction", self.validation_fraction,
          "0 for a private run, which trains on the whole training set and"
          " reports test accuracy")


class TrialDiverged(RuntimeError):
  """The weights became NaN or infinite: the run stops, never trains on."""


@dataclasses.dataclass(frozen=True)
class TrialResult:
  """The last report of a finished run, and every report before it."""

  metrics: dict[str, Any]
  history: list[dict[str, Any]]


Report = Callable[[dict[str, Any], pathlib.Path | None], None]


def run_trial(
    config: TrialConfig,
    report: Report | None = None,
    checkpoint_dir: str | pathlib.Path | None = None,
    on_step: Callable[[int], None] | None = None,
    rank: int = 0,
    world_size: int = 1,
) -> TrialResult:
  """Trains one model with DP-SGD and reports its metrics as it goes.

  Args:
    config: the run.
    report: called at every evaluation with the metrics and, when
      `checkpoint_dir` is set, the directory of a checkpoint taken just before.
      On ranks other than 0 the metrics hold only the step.
    checkpoint_dir: where to checkpoint; a checkpoint already there is resumed.
    on_step: called after every logical step with the number of steps done
      (progress bars).
    rank: this worker's place among `world_size` data-parallel workers.
    world_size: the number of workers; above 1, `torch.distributed` must be
      initialised (Ray Train does it).

  Raises:
    ConfigError: the config does not fit the data (B > N, say).
    TrialDiverged: the loss became non-finite.
  """
  run = _Run(config, rank, world_size)
  checkpoint_dir = pathlib.Path(checkpoint_dir) if checkpoint_dir else None
  if checkpoint_dir and (checkpoint_dir / CHECKPOINT_FILE).exists():
    run.load(checkpoint_dir / CHECKPOINT_FILE)
  steps = config.privacy.steps
  while run.step < steps:
    run.train_step()
    if on_step:
      on_step(run.step)
    if run.step % config.eval_every == 0 or run.step == steps:
      if world_size > 1:
        _check_replicas_agree(run.model, run.step)
      metrics = run.evaluate()
      if checkpoint_dir and rank == 0:
        run.save(checkpoint_dir)
      if report:
        report(metrics, checkpoint_dir)
  if not run.history:  # Resumed from a checkpoint of the finished run.
    run.history.append(run.evaluate())
  return TrialResult(metrics=run.history[-1], history=list(run.history))


class _Run:
  """The mutable state of one run: model, optimiser, EMA, generators."""

  def __init__(self, config: TrialConfig, rank: int = 0, world_size: int = 1):
    if not 0 <= rank < world_size:
      raise ValueError(f"rank {rank} is not in [0, world_size = {world_size})")
    self.config = config
    self.rank = rank
    self.world_size = world_size
    self.device = _device(config.device)
    self.data = datasets.load_dataset(config.dataset)
    self.train, self.held_out, self.evaluated_on = datasets.evaluation_splits(
        self.data, config.validation_fraction, config.dataset.seed)
    self.num_train = len(self.train)
    privacy = config.privacy
    if privacy.batch_size > self.num_train:
      raise ConfigError(
          "privacy.batch_size",
          privacy.batch_size,
          f"at most the training-set size N = {self.num_train} of"
          f" {config.dataset.name}",
      )
    if privacy.claims_privacy:
      triplet_lib.require_private_delta("privacy.delta", privacy.delta,
                                        self.num_train)
    seeds = seeds_lib.run_seeds(config.seed, privacy.claims_privacy,
                                world_size)
    torch.manual_seed(seeds.init)  # Initialisation: alike on every rank.
    self.model = models.build_model(
        config.model, self.data.image_shape, self.data.num_classes
    ).to(self.device)
    optim = config.optim
    self.optimizer = torch.optim.SGD(
        self.model.parameters(),
        lr=optim.lr,
        momentum=optim.momentum,
        dampening=optim.dampening,
    )
    self.sampling_generator = torch.Generator().manual_seed(seeds.sampling)
    self.noise_generator = torch.Generator(self.device).manual_seed(
        seeds.noise
    )
    del seeds  # Only the generators keep the secret, and the checkpoints.
    self.augment_generator = torch.Generator()  # Reseeded at every step.
    self.sampler = sampling.PoissonSampler(
        self.num_train, privacy.batch_size, self.sampling_generator
    )
    self.dp_sgd = dp_sgd.DPSGD(
        self.model,
        self.optimizer,
        clip_norm=privacy.clip_norm if privacy.private else None,
        noise_multiplier=privacy.noise_multiplier if privacy.private else 0.0,
        expected_batch_size=privacy.batch_size,
        generator=self.noise_generator,
        all_reduce=torch.distributed.all_reduce if world_size > 1 else None,
    )
    self.ema = (
        ema_lib.WeightAverage(self.model, optim.ema_decay)
        if optim.ema_decay is not None
        else None
    )
    self.step = 0
    self.history: list[dict[str, Any]] = []
    self._window = _Window()
    mean = torch.tensor(self.data.mean, device=self.device).view(-1, 1, 1)
    std = torch.tensor(self.data.std, device=self.device).view(-1, 1, 1)
    self._normalise = lambda x: (x - mean) / std

  def train_step(self) -> None:
    start = time.perf_counter()
    # Every rank draws the same batch and keeps its share of it.
    indices = self.sampler.sample()[self.rank::self.world_size]
    augment_seed, dropout_seed = np.random.SeedSequence(
        [self.config.seed, self.step, self.rank]
    ).generate_state(2)
    self.augment_generator.manual_seed(int(augment_seed))
    torch.manual_seed(int(dropout_seed))
    self.model.train()
    stats = self.dp_sgd.step(
        self._micro_batch(chunk)
        for chunk in sampling.micro_batches(
            indices, self.config.max_physical_batch
        )
    )
    self.step += 1
    # The weights, not the loss: a private run may act on its DP output only.
    if not _all_finite(self.model):
      raise TrialDiverged(
          f"the weights are not finite after step {self.step}: the run"
          " diverged and was stopped (lower lr, or check the data)"
      )
    if self.ema:
      self.ema.update(self.model, self.step)
    if not self.config.privacy.claims_privacy:
      self._window.add(stats, time.perf_counter() - start)

  def _micro_batch(
      self, indices: torch.Tensor
  ) -> tuple[torch.Tensor, torch.Tensor]:
    images, labels = self.train.get_batch(indices)
    copies = augment_lib.augment(
        images.to(self.device), self.config.augment, self.augment_generator
    )
    return self._normalise(copies), labels.to(self.device)

  @torch.no_grad()
  def evaluate(self) -> dict[str, Any]:
    metrics: dict[str, Any] = {"step": self.step}
    if self.rank:
      return metrics  # Rank 0 evaluates the replica they all hold.
    # Training statistics of a simulation only: a private run has none.
    metrics.update(self._window.summary())
    self._window = _Window()
    metrics["evaluated_on"] = self.evaluated_on
    metrics["accuracy"] = self._accuracy(self.model)
    averaged = self.model
    if self.ema:
      averaged = copy.deepcopy(self.model)
      self.ema.copy_to(averaged)
      metrics["ema_accuracy"] = self._accuracy(averaged)
    if self.config.augment.family != "none":
      metrics["augtest_accuracy"] = self._accuracy(averaged, augmented=True)
    metrics.update(self._privacy_metrics())
    if self.config.privacy.claims_privacy:
      assert set(metrics) <= set(PRIVATE_METRICS), sorted(metrics)
    self.history.append(metrics)
    return metrics

  def _accuracy(self, model: nn.Module, augmented: bool = False) -> float:
    """Held-out accuracy; AugTest votes over K copies made as in training."""
    model.eval()
    # A fresh generator per evaluation: AugTest is the same whenever it runs.
    generator = torch.Generator().manual_seed(self.config.seed)
    held_out = self.held_out
    correct = 0
    for chunk in torch.split(
        torch.arange(len(held_out)), self.config.max_physical_batch
    ):
      images, labels = held_out.get_batch(chunk)
      images, labels = images.to(self.device), labels.to(self.device)
      if augmented:
        copies = augment_lib.augment(images, self.config.augment, generator)
        b, k = copies.shape[:2]
        votes = model(self._normalise(copies).flatten(end_dim=1)).argmax(1)
        one_hot = nn.functional.one_hot(votes, self.data.num_classes)
        predictions = one_hot.view(b, k, -1).sum(1).argmax(1)
      else:
        predictions = model(self._normalise(images)).argmax(1)
      correct += int((predictions == labels).sum())
    return correct / len(held_out)

  def _privacy_metrics(self) -> dict[str, Any]:
    """The epsilon spent so far, and whether it is one to quote."""
    privacy = self.config.privacy
    if not privacy.private:
      return {"private": False, "simulated": False, "epsilon": math.inf}
    spent = triplet_lib.PrivacyTriplet(
        self.num_train, privacy.batch_size, privacy.noise_multiplier,
        self.step,
    )
    metrics = {
        "epsilon": accounting.epsilon(spent, privacy.delta).epsilon,
        "accountant": "rdp",
        "simulated": privacy.simulated,
        "private": privacy.claims_privacy,
    }
    if privacy.simulated:
      reference = triplet_lib.rescale(spent, privacy.reference_batch_size)
      metrics["reference_epsilon"] = accounting.epsilon(
          reference, privacy.delta
      ).epsilon
    return metrics

  def state_dict(self) -> dict[str, Any]:
    return {
        "step": self.step,
        "model": self.model.state_dict(),
        "optimizer": self.optimizer.state_dict(),
        "ema": self.ema.state_dict() if self.ema else None,
        "sampling_rng": self.sampling_generator.get_state(),
        "noise_rng": self.noise_generator.get_state(),
        "history": self.history,
    }

  def save(self, directory: pathlib.Path) -> None:
    """Writes the checkpoint atomically and owner-only.

    A crash never leaves half a file, and no other user reads the generator
    states, which are secret in a private run.
    """
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    partial = directory / (CHECKPOINT_FILE + ".partial")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as file:
      torch.save(self.state_dict(), file)
    os.replace(partial, directory / CHECKPOINT_FILE)

  def load(self, path: pathlib.Path) -> None:
    # On the CPU: generator states must be CPU tensors whatever the device;
    # load_state_dict moves weights and optimiser state to theirs.
    state = torch.load(path, map_location="cpu", weights_only=False)
    self.step = state["step"]
    self.model.load_state_dict(state["model"])
    self.optimizer.load_state_dict(state["optimizer"])
    if self.ema:
      self.ema.load_state_dict(state["ema"])
    self.sampling_generator.set_state(state["sampling_rng"])
    self.noise_generator.set_state(state["noise_rng"])
    self.history = state["history"]


class _Window:
  """Training loss and throughput since the last evaluation."""

  def __init__(self):
    self.examples, self.loss_sum, self.clipped, self.seconds = 0, 0.0, 0, 0.0

  def add(self, stats: dp_sgd.StepStats, seconds: float) -> None:
    self.examples += stats.examples
    self.loss_sum += stats.loss_sum
    self.clipped += stats.clipped
    self.seconds += seconds

  def summary(self) -> dict[str, float]:
    if not self.examples:
      return {}
    return {
        "train_loss": self.loss_sum / self.examples,
        "clipped_fraction": self.clipped / self.examples,
        "examples_per_second": self.examples / max(self.seconds, 1e-9),
    }


def _check_replicas_agree(model: nn.Module, step: int) -> None:
  """Every data-parallel replica must hold the same weights.

  They do only if every rank sampled the same batch and drew the same noise
  (the secret seeds are broadcast from rank 0); a checksum per rank catches
  any divergence before anything is evaluated or saved.
  """
  checksum = torch.stack(
      [p.detach().double().sum() for p in model.parameters()]).sum().view(1)
  gathered = [torch.empty_like(checksum)
              for _ in range(torch.distributed.get_world_size())]
  torch.distributed.all_gather(gathered, checksum)
  if not torch.allclose(torch.cat(gathered), checksum, rtol=1e-9, atol=0):
    raise RuntimeError(
        f"data-parallel replicas disagree at step {step}: weight checksums"
        f" {[float(c) for c in gathered]}")


def _all_finite(model: nn.Module) -> bool:
  """One device sync for the whole model, not one per parameter."""
  finite = [p.isfinite().all() for p in model.parameters()]
  return bool(torch.stack(finite).all()) if finite else True


def _device(name: str) -> torch.device:
  if name == "auto":
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
  try:
    device = torch.device(name)
  except RuntimeError:
    raise ConfigError("device", name, "expected 'auto', 'cpu' or 'cuda[:N]'") from None
  if device.type == "cuda" and not torch.cuda.is_available():
    raise ConfigError("device", name, "no CUDA device is visible; use 'cpu'")
  return device
