"""Where a run's randomness comes from: the public seed, or the OS's secret.

DP-SGD's accountant assumes two things stay hidden: which examples each
logical batch sampled, and the Gaussian noise added to each step. A run that
claims a guarantee (a private run, not a simulation) therefore seeds its
sampling and noise generators from the operating system's cryptographic
source (`secrets`), and the seeds are never written anywhere: not in MLflow,
not in `model.pt`, not in a log, not even in this object's repr. Anyone who
knew them could replay the run with and without a target example and compare
with the released weights.

Dropout is secret in a private run too. Its masks are drawn by torch's
global generator in batch order, so an added example moves every later
example onto another mask; with a public seed the adversary would know both
assignments, and neighbouring datasets would differ in many clipped terms.
With a secret seed each position's mask is an independent draw the adversary
does not know: whichever position an example lands in, the other examples'
masks have the same joint distribution with or without it, so the sums can
be coupled to differ in that example's clipped term alone (sensitivity C).

Augmentation is secret in a private run as well, and keyed by content: each
training example's copies are drawn from (augment seed, step, the example's
content id) alone (`run_state.py`, `keyed_random.py`), so adding or removing
any example anywhere leaves every other example's copies equal, and nobody
without the seed can tell which copies an example got. Initialisation stays
reproducible from the public `seed` of the config: the accountant does not
assume it hidden. Simulated trials draw everything from the public seed,
which gives the search common random numbers (a fairer comparison of trials)
while sharing nothing with a private run.

Data-parallel workers must sample the same batch, add the same noise, draw
from the same dropout stream and key augmentation alike, so rank 0 draws the
secret seeds and broadcasts them to the other ranks over the process group
Ray Train has set up; nothing leaves the workers' memory. Once training has
started, the generators' states and the augment key live in the run's
checkpoints (so that a resumed run is exact), which are therefore secrets
too while the run lives (`run_state.py` writes them owner-only and strips
them from a finished run's checkpoint).
"""

import dataclasses
import secrets

import numpy as np
import torch

# The seeds torch generators take: 64-bit, kept positive.
_SEED_BITS = 63


@dataclasses.dataclass(frozen=True)
class RunSeeds:
  """The seeds of one run's generators.

  Attributes:
    init: the weights' initialisation (public).
    sampling: the Poisson sampler; secret in a private run.
    noise: the Gaussian noise; secret in a private run.
    dropout: the stream that reseeds dropout at every step; secret in a
      private run.
    augment: the key of augmentation's draws (with the step and each
      example's content id); secret in a private run.
    secret: whether `sampling`, `noise`, `dropout` and `augment` came from
      the OS's secret source.
  """

  init: int
  sampling: int = dataclasses.field(repr=False)
  noise: int = dataclasses.field(repr=False)
  dropout: int = dataclasses.field(repr=False)
  augment: int = dataclasses.field(repr=False)
  secret: bool


def run_seeds(public_seed: int, secret: bool, world_size: int = 1) -> RunSeeds:
  """The seeds of a run: all public, or all but `init` secret.

  Args:
    public_seed: the config's seed.
    secret: draw the sampling, noise, dropout and augment seeds from the OS
      (a private run).
    world_size: with more than one worker, `torch.distributed` must be
      initialised; rank 0's secret seeds are broadcast to every rank.
  """
  # A SeedSequence's first words do not depend on how many are asked for:
  # the public init, sampling and noise seeds are those of three words.
  init, sampling, noise, dropout, augment = (
      int(s) for s in np.random.SeedSequence(public_seed).generate_state(5))
  if secret:
    drawn = [secrets.randbits(_SEED_BITS) for _ in range(4)]
    if world_size > 1:
      torch.distributed.broadcast_object_list(drawn, src=0)
    sampling, noise, dropout, augment = drawn
  return RunSeeds(init=init, sampling=sampling, noise=noise, dropout=dropout,
                  augment=augment, secret=secret)
