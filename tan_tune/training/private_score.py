"""A private search's trial score: a DP count of correct predictions on a
validation split held out of the private training data.

The split. Example x is held out iff u(x) < f, where

    u(x) = HMAC-SHA256(k, digest(x)) read as a number in [0, 1),

k the search's secret key and f the search file's `validation_fraction`.
u(x) depends on x's content alone, so adding or removing one example moves
no other between the parts; which part x is in, and the parts' sizes (|V| ~
Binomial(N, f)), stay secret with k. The training part is sampled at the
reference rate q = B / N of the whole training set, the rate the search is
charged for: its own size is never divided by.

The score. c = the number of examples of V the trial's model predicts
correctly. Adding or removing an example of V moves c by at most 1; one of
the training part moves c only through the model, which DP-SGD's accounting
covers. The trial releases

    score = (c + Z) / (f N),    Z ~ N(0, s^2),

a Gaussian mechanism of sensitivity 1 and noise multiplier s, divided by the
public expected size f N. Its accounting composes it with the trial's
DP-SGD steps (`privacy/tuning.py`).
"""

import dataclasses
import hashlib
import hmac
from typing import Sequence

import torch

from tan_tune.errors import ConfigError
from tan_tune.training import splits

# The name the split's key is derived under from the search's seal
# (`checkpoint_file.Seal.derive`); no trial is named so.
SPLIT_KEY = "validation split"
# What a scored trial says it evaluated on.
EVALUATED_ON = "validation held out of the private data (DP count)"
# The accuracies a score may count, and so the search metrics it serves.
SCORED_METRICS = ("accuracy", "ema_accuracy", "augtest_accuracy")
# The largest standard deviation of a score, in accuracy, that still ranks
# trials: s / (f N) above it and the search is refused.
MAX_SCORE_STD = 0.02
# u(x) from the first 8 bytes of the HMAC.
_SCALE = float(2**64)


@dataclasses.dataclass(frozen=True)
class PrivateScore:
  """How a private search's trial is scored.

  Attributes:
    fraction: f, the expected fraction of the training set held out.
    noise: s, the standard deviation of the Gaussian added to the count.
    metric: which predictions are counted (`SCORED_METRICS`): the raw
      weights', the EMA's, or the EMA's AugTest vote.
  """

  fraction: float
  noise: float
  metric: str

  def __post_init__(self):
    if not 0 < self.fraction < 1:
      raise ConfigError("validation_fraction", self.fraction,
                        "a fraction in (0, 1)")
    if not self.noise > 0:
      raise ConfigError("score_noise", self.noise,
                        "a standard deviation s > 0 of the score's noise")
    if self.metric not in SCORED_METRICS:
      raise ConfigError("metric", self.metric,
                        f"one of {list(SCORED_METRICS)}: a count of correct"
                        " predictions, of sensitivity 1")

  def noisy(self, correct: int, dataset_size: int,
            generator: torch.Generator) -> float:
    """(c + Z) / (f N) for N = `dataset_size`, Z drawn from the run's
    secret noise generator."""
    z = torch.randn((), generator=generator, dtype=torch.float64,
                    device=generator.device)
    return float((correct + self.noise * z) / (self.fraction * dataset_size))


def check_useful(fraction: float, noise: float, dataset_size: int) -> None:
  """Raises ConfigError if the score's noise would drown the ranking: its
  standard deviation s / (f N) above MAX_SCORE_STD. Names `score_noise`
  when even half the training set held out would not do, else
  `validation_fraction`."""
  limit = MAX_SCORE_STD
  if noise / (dataset_size / 2) > limit:
    raise ConfigError(
        "score_noise", noise,
        f"a noise the score survives: s = {noise:g} is"
        f" {100 * noise / (dataset_size / 2):.2g} points of accuracy even on"
        f" half the N = {dataset_size} training examples (at most"
        f" {100 * limit:g}: s <= {limit * dataset_size / 2:g})")
  if noise / (fraction * dataset_size) > limit:
    raise ConfigError(
        "validation_fraction", fraction,
        f"a split large enough for score_noise {noise:g}: about"
        f" {fraction * dataset_size:.0f} examples make its noise"
        f" {100 * noise / (fraction * dataset_size):.2g} points of accuracy"
        f" (at most {100 * limit:g}: a fraction >="
        f" {noise / (limit * dataset_size):.3g})")


def held_out(digests: Sequence[bytes], fraction: float,
             key: bytes) -> torch.Tensor:
  """A bool per example: in the validation split (u(x) < f)."""
  flags = [int.from_bytes(hmac.new(key, digest, hashlib.sha256).digest()[:8],
                          "big") / _SCALE < fraction for digest in digests]
  return torch.tensor(flags, dtype=torch.bool)


def split(train: splits.Split, digests: Sequence[bytes], fraction: float,
          key: bytes) -> tuple[splits.Split, splits.Split]:
  """The training part and the validation part of `train`, whose examples'
  digests are `digests` (of the raw examples, also when `train` holds
  their features)."""
  flags = held_out(digests, fraction, key)
  indices = torch.arange(len(train))
  return (splits.SubsetSplit(train, indices[~flags]),
          splits.SubsetSplit(train, indices[flags]))
