"""The mutable state of one run: model, optimiser, EMA, generators, data.

`trial.run_trial` drives a `RunState` step by step: `train_step` draws a
Poisson batch, augments it and takes one DP-SGD step; `evaluate` measures the
held-out accuracies and the epsilon spent; `save` and `load` checkpoint
everything, generator states included, so a resumed run is exact.

Augmentation is keyed by content (`keyed_random.py`): the copies of training
example x at step t are a function of (augment key, t, id(x)) alone, id(x)
the first 63 bits of x's digest (`splits.content_ids`, computed once per
run), so inserting or removing any example anywhere, which moves positions,
changes no other example's copies. The key is the public seed's in a
simulation and a secret seed in a private run (`seeds.py`). Dropout masks come
from torch's global generator, reseeded at every step from the dropout
generator and the rank; in a private run that generator is secret, so
whatever position an example takes its mask is a fresh draw the adversary
does not know, and the other masks have the same joint law with or without
it. Either way the neighbouring sums differ in one clipped term.

A private run (`PrivacyConfig.claims_privacy`) draws its sampling, noise,
dropout and augment seeds secretly (`seeds.py`), writes its checkpoints
owner-only, and reports only `PRIVATE_METRICS`: training statistics (loss,
clip fraction, throughput) are kept for simulations alone.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import pathlib
import time
from typing import Any, Mapping

import numpy as np
import torch
from torch import nn

from tan_tune.errors import ConfigError
from tan_tune.privacy import accounting
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.training import augment as augment_lib
from tan_tune.training import canaries as canaries_lib
from tan_tune.training import checkpoint_file
from tan_tune.training import clipping as clipping_lib
from tan_tune.training import datasets
from tan_tune.training import dp_sgd
from tan_tune.training import ema as ema_lib
from tan_tune.training import fixed_features
from tan_tune.training import keyed_random
from tan_tune.training import models
from tan_tune.training import private_score
from tan_tune.training import sampling
from tan_tune.training import seeds as seeds_lib
from tan_tune.training import splits
from tan_tune.training import trial_config

# Domain tags of the augmentation keys (key, tag, ...): training and AugTest
# never share draws.
_AUGMENT_STREAM, _AUGTEST_STREAM = 1, 2
# All a private run reports at an evaluation: DP outputs and their accounting.
PRIVATE_METRICS = ("step", "accuracy", "ema_accuracy", "augtest_accuracy",
                   "epsilon", "accountant", "adjacency", "sampling",
                   "private", "simulated", "evaluated_on", "clipping",
                   "score")


class RunState:
  """The mutable state of one run: model, optimiser, EMA, generators."""

  def __init__(self, config: trial_config.TrialConfig, rank: int = 0,
               world_size: int = 1,
               seal: checkpoint_file.Seal | None = None,
               shared_features: Mapping[str, fixed_features.Features]
               | None = None, split_key: bytes | None = None):
    if not 0 <= rank < world_size:
      raise ValueError(f"rank {rank} is not in [0, world_size = {world_size})")
    self.config = config
    self.rank = rank
    self.world_size = world_size
    # A private run's: its checkpoints are sealed under its charge's key,
    # and only a run of that charge opens them.
    self.seal = seal
    self.device = _device(config.device)
    self.data = datasets.load_dataset(config.dataset)
    datasets.check_augmentation(self.data, config.augment.family)
    privacy = config.privacy
    seeds = seeds_lib.run_seeds(config.seed, privacy.claims_privacy,
                                world_size)
    torch.manual_seed(seeds.init)  # Initialisation: alike on every rank.
    self.model = models.build_model(
        config.model, self.data.input_shape, self.data.num_classes
    ).to(self.device)
    self.normalise = datasets.normaliser(self.data, self.device)
    # What DP-SGD trains and evaluation scores: the model, or the head over
    # its fixed front end's features, computed once (`fixed_features.py`).
    self.network = self.model
    inputs = self.data
    if fixed_features.skipped_because(self.model, config.augment.family,
                                      bool(config.canaries)) is None:
      self.network = fixed_features.head(self.model)
      inputs = fixed_features.feature_dataset(self.data, fixed_features.of_run(
          config.dataset, config.model, self.data, self.model, self.device,
          shared_features))
      self.normalise = lambda x: x  # The features are of normalised inputs.
    self.train, self.held_out, self.evaluated_on = splits.evaluation_splits(
        inputs.train, inputs.test, config.validation_fraction,
        config.dataset.seed)
    if config.score:  # A private search's trial, scored on private data.
      self.train, self.held_out = private_score.split(
          inputs.train, self.data.train.example_digests(),
          config.score.fraction, split_key)
      self.evaluated_on = private_score.EVALUATED_ON
    self.canaries = None
    if config.canaries:  # An audited run: base examples and canaries.
      base = (self.data.test if config.canaries.base == canaries_lib.PUBLIC
              else self.train)
      self.canaries = canaries_lib.Canaries(
          config.canaries, config.seed, base, self.data.input_shape,
          self.data.num_classes, self.model)
      self.train = self.canaries.split
      if config.canaries.base == canaries_lib.PUBLIC:
        self.evaluated_on = "test, trained on too (an audit on public data)"
    # N of the accountant. An audit whose examples join on their own coins
    # draws from its public universe (every canary, included or not): the
    # rows present count the secretly included canaries (`canaries.py`); a
    # scored trial's training part, from the whole training set's.
    universe = self.canaries and privacy.scheme.sampler.independent_membership
    self.num_train = (self.canaries.universe_size if universe
                      else len(inputs.train) if config.score
                      else len(self.train))
    check_fits(config, self.num_train)
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
    self.dropout_generator = torch.Generator().manual_seed(seeds.dropout)
    self.augment_key = seeds.augment
    del seeds  # Only the generators keep the secret, and the checkpoints.
    self.content_ids = (splits.content_ids(self.train)  # Once per run.
                        if config.augment.family != "none" else None)
    self.sampler = sampling.Sampler(
        privacy.scheme, self.num_train, privacy.batch_size,
        self.sampling_generator, rows=len(self.train)
    )
    self.dp_sgd = dp_sgd.DPSGD(
        self.network,
        self.optimizer,
        clip_norm=privacy.clip_norm if privacy.private else None,
        noise_multiplier=privacy.noise_multiplier if privacy.private else 0.0,
        expected_batch_size=privacy.batch_size,
        generator=self.noise_generator,
        all_reduce=torch.distributed.all_reduce if world_size > 1 else None,
        clipping=clipping_lib.resolve(config.clipping, self.network,
                                      privacy.jl_projections),
    )
    self.ema = (
        ema_lib.WeightAverage(self.model, optim.ema_decay)
        if optim.ema_decay is not None
        else None
    )
    self.step = 0
    self.history: list[dict[str, Any]] = []
    self._window = dp_sgd.StatsWindow()

  def train_step(self) -> None:
    start = time.perf_counter()
    # Every rank draws the same batch and keeps its share of it.
    batch = self.sampler.sample().shard(self.rank, self.world_size)
    # One draw per step from the (secret in a private run) dropout stream;
    # ranks hold different shards, so their masks may differ.
    draw = int(torch.randint(2**62, (1,), generator=self.dropout_generator))
    torch.manual_seed(int(np.random.SeedSequence(
        [draw, self.rank]).generate_state(1, np.uint64)[0]))
    self.model.train()
    added = None
    if self.canaries:
      indices, weights, drawn = self.canaries.split_rows(batch.indices,
                                                        batch.weights)
      batch = sampling.LogicalBatch(indices, weights)
      added = self.canaries.gradient_sum(self.model, drawn,
                                         self.config.privacy.clip_norm)
    stats = self.dp_sgd.step(
        (self._micro_batch(chunk)
         for chunk in sampling.micro_batches(
             batch, self.config.max_physical_batch)),
        added=added,
    )
    self.step += 1
    if self.ema:
      self.ema.update(self.model, self.step)
    if not self.config.privacy.claims_privacy:
      self._window.add(stats, time.perf_counter() - start)

  def _micro_batch(self, chunk: sampling.LogicalBatch) -> dp_sgd.MicroBatch:
    images, labels = self.train.get_batch(chunk.indices)
    # Keyed by content, never by position: inserting or removing another
    # example anywhere changes none of this one's copies.
    draws = (None if self.content_ids is None
             else keyed_random.KeyedRandom.for_items(
                 (self.augment_key, _AUGMENT_STREAM, self.step),
                 self.content_ids[chunk.indices]))
    copies = augment_lib.augment(
        images.to(self.device), self.config.augment, draws)
    weights = (None if chunk.weights is None
               else chunk.weights.to(self.device))
    return self.normalise(copies), labels.to(self.device), weights

  @torch.no_grad()
  def evaluate(self) -> dict[str, Any]:
    metrics: dict[str, Any] = {"step": self.step}
    if self.rank:
      return metrics  # Rank 0 evaluates the replica they all hold.
    # Training statistics of a simulation only: a private run has none.
    metrics.update(self._window.summary())
    self._window = dp_sgd.StatsWindow()
    metrics["evaluated_on"] = self.evaluated_on
    if self.config.privacy.private:
      metrics["clipping"] = self.dp_sgd.clipping
    if self.config.score:
      metrics["score"] = self._score()
    else:
      metrics.update(self.accuracies())
    metrics.update(self._privacy_metrics())
    if self.config.privacy.claims_privacy:
      assert set(metrics) <= set(PRIVATE_METRICS), sorted(metrics)
    self.history.append(metrics)
    return metrics

  def accuracies(self) -> dict[str, float]:
    """The held-out accuracies: the weights', the EMA's, AugTest's."""
    accuracies = {"accuracy": self._correct(self.network)}
    averaged = self.network
    if self.ema:
      averaged = copy.deepcopy(self.network)
      self.ema.copy_to(averaged)
      accuracies["ema_accuracy"] = self._correct(averaged)
    if self.config.augment.family != "none":
      accuracies["augtest_accuracy"] = self._correct(averaged, augmented=True)
    return {key: correct / len(self.held_out)
            for key, correct in accuracies.items()}

  def _score(self) -> float | None:
    """A scored trial's DP score, once, at its last step; None before."""
    if self.step < self.config.privacy.steps:
      return None
    score = self.config.score
    model = self.network
    if score.metric != "accuracy" and self.ema:
      model = copy.deepcopy(self.network)
      self.ema.copy_to(model)
    correct = self._correct(model, augmented=score.metric == "augtest_accuracy")
    return score.noisy(correct, self.num_train, self.noise_generator)

  def _correct(self, model: nn.Module, augmented: bool = False) -> int:
    """Held-out predictions that are right; AugTest votes over K copies
    made as in training."""
    model.eval()
    held_out = self.held_out
    correct = 0
    for chunk in torch.split(
        torch.arange(len(held_out)), self.config.max_physical_batch
    ):
      images, labels = held_out.get_batch(chunk)
      images, labels = images.to(self.device), labels.to(self.device)
      if augmented:
        # Keyed by held-out position with a fixed key: AugTest is the same
        # whenever it runs, whatever the chunking.
        draws = keyed_random.KeyedRandom.for_items(
            (self.config.seed, _AUGTEST_STREAM), chunk)
        copies = augment_lib.augment(images, self.config.augment, draws)
        b, k = copies.shape[:2]
        votes = model(self.normalise(copies).flatten(end_dim=1)).argmax(1)
        one_hot = nn.functional.one_hot(votes, self.data.num_classes)
        predictions = one_hot.view(b, k, -1).sum(1).argmax(1)
      else:
        predictions = model(self.normalise(images)).argmax(1)
      correct += int((predictions == labels).sum())
    return correct

  def _privacy_metrics(self) -> dict[str, Any]:
    """The epsilon spent so far, and whether it is one to quote."""
    privacy = self.config.privacy
    if not privacy.private:
      return {"private": False, "simulated": False, "epsilon": math.inf}
    spent = triplet_lib.PrivacyTriplet(
        self.num_train, privacy.batch_size, privacy.noise_multiplier,
        self.step,
    )
    scheme = privacy.scheme
    metrics = {
        "epsilon": accounting.epsilon_or_inf(spent, privacy.delta, scheme=scheme),
        "accountant": scheme.default_accountant,
        "adjacency": scheme.adjacency,
        "sampling": scheme.describe(privacy.batch_size),
        "simulated": privacy.simulated,
        "private": privacy.claims_privacy,
    }
    if privacy.simulated:
      # The reference run trains on the whole training set, validation too.
      whole = dataclasses.replace(spent, dataset_size=self.data.num_train)
      reference = triplet_lib.rescale(whole, privacy.reference_batch_size)
      metrics["reference_epsilon"] = accounting.epsilon_or_inf(
          reference, privacy.delta, scheme=scheme)
    return metrics

  def state_dict(self) -> dict[str, Any]:
    return {
        "step": self.step,
        "model": self.model.state_dict(),
        "optimizer": self.optimizer.state_dict(),
        "ema": self.ema.state_dict() if self.ema else None,
        "sampling_rng": self.sampling_generator.get_state(),
        "noise_rng": self.noise_generator.get_state(),
        "dropout_rng": self.dropout_generator.get_state(),
        "augment_rng": self.augment_key,
        "history": self.history,
    }

  def save(self, directory: pathlib.Path) -> None:
    """Writes the checkpoint atomically and owner-only, sealed in a
    private run.

    A crash never leaves half a file, and no other user reads the generator
    states, which are secret in a private run.
    """
    checkpoint_file.write(directory / checkpoint_file.CHECKPOINT_FILE,
                          self.state_dict(), self.seal)

  def load(self, path: pathlib.Path) -> None:
    """Resumes from the checkpoint at `path`; a private run's seal is checked
    before anything in it is loaded (`checkpoint_file.CheckpointRefused`)."""
    state = checkpoint_file.read(path, self.seal)
    self.step = state["step"]
    self.model.load_state_dict(state["model"])
    self.optimizer.load_state_dict(state["optimizer"])
    if self.ema:
      self.ema.load_state_dict(state["ema"])
    self.history = state["history"]
    if "sampling_rng" not in state:  # `strip_generator_states` ran.
      if self.step < self.config.privacy.steps:
        raise ValueError(f"{path} has no generator states: it is the"
                         " checkpoint of a finished run, not one to resume")
      return
    self.sampling_generator.set_state(state["sampling_rng"])
    self.noise_generator.set_state(state["noise_rng"])
    self.dropout_generator.set_state(state["dropout_rng"])
    # A checkpoint from before augmentation was keyed by content has none.
    self.augment_key = state.get("augment_rng", self.augment_key)


def check_fits(config: trial_config.TrialConfig, num_train: int) -> None:
  """Raises ConfigError if the config does not fit N training examples
  (the accountant's N: an audit's universe under Poisson sampling): B > N,
  or a private run's delta > 1 / N."""
  privacy = config.privacy
  if privacy.batch_size > num_train:
    raise ConfigError(
        "privacy.batch_size",
        privacy.batch_size,
        f"at most the training-set size N = {num_train} of"
        f" {config.dataset.title}",
    )
  if privacy.claims_privacy:
    triplet_lib.require_private_delta("privacy.delta", privacy.delta,
                                      num_train)


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
