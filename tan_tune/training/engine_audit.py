"""The DP-SGD engine audited in one run with Dirac canaries (white box).

Steinke, Nasr & Jagielski, "Privacy Auditing with One (1) Training Run"
(NeurIPS 2023), in the setting where a bug is easiest to see: the training
set is m canaries, each kept iff its secret S_i = +1, and the model is a
linear classifier without bias on d = ceil(m / K) input coordinates. Canary i
is the input a e_{j_i}, j_i = i // K, with label y_i = i mod K, so its
gradient lies in column j_i of the weights W,

    grad_W l_i = a (p_i - e_{y_i}) e_{j_i}^T,     |grad_W l_i| > C for a >> C,

and every engine clips it to norm C. DP-SGD (plain SGD, lr = B, so W moves
by the clipped sum plus noise) trains on the kept canaries through the real
sampler, clipping engine and noise; the score of canary i is the growth of
its own coordinate,

    Y_i = (W_S - W_ref)[y_i, j_i],

with W_ref = W_0 = 0, or the noise alone where the auditor can replay it (a
public noise seed). Each kept canary adds about C (1 - 1/K) per step it is
sampled in; the noise adds N(0, S sigma^2 C^2). The auditor guesses the
k highest scores in and the k lowest out; `privacy.audit` turns the right
guesses into eps_lb. A correct engine gives eps_lb <= eps except with
probability 1 - confidence; a broken one (less noise than claimed, no
clipping, noise an attacker can replay) shows above eps when the audit has
the power, which the ceiling bounds.
"""

import dataclasses
import math

import numpy as np
import torch
from torch import nn

from tan_tune.privacy import accounting
from tan_tune.privacy import audit
from tan_tune.privacy.sampling_scheme import SamplingScheme
from tan_tune.privacy.triplet import PrivacyTriplet
from tan_tune.training import clipping as clipping_lib
from tan_tune.training import dp_sgd
from tan_tune.training import sampling


@dataclasses.dataclass(frozen=True)
class CanarySetup:
  """One audit's canaries and training.

  Attributes:
    canaries: m.
    classes: K; the canaries take d = ceil(m / K) input coordinates.
    batch_size: B, expected (Poisson) or exact (fixed-size) logical batch.
    steps: S.
    amplitude: a, the canary input's one non-zero value; its gradient norm is
      about a, far above C, so clipping binds.
    clip_norm: C. Small beside 1 / a: the noise then moves the logits
      (a sigma C sqrt(S)) too little to change p_i, so every kept canary
      pushes its coordinate by the same C (1 - 1/K) each time it is sampled.
    guesses: r, split evenly between guessed in and guessed out.
    delta: of the claimed (eps, delta) and of the bound.
    confidence: 1 - beta of the bound.
  """

  canaries: int = 4000
  classes: int = 10
  batch_size: int = 1000
  steps: int = 25
  amplitude: float = 0.1
  clip_norm: float = 1e-3
  guesses: int = 200
  delta: float = 1e-5
  confidence: float = 0.95

  @property
  def inputs(self) -> int:
    return math.ceil(self.canaries / self.classes)

  def images(self) -> tuple[torch.Tensor, torch.Tensor]:
    """Every canary's input [m, 1, 1, 1, d] (one copy each) and label."""
    index = torch.arange(self.canaries)
    images = torch.zeros(self.canaries, 1, 1, 1, self.inputs)
    images[index, 0, 0, 0, index // self.classes] = self.amplitude
    return images, index % self.classes

  def model(self) -> nn.Module:
    """The linear classifier, W_0 = 0: public, and the same every run."""
    linear = nn.Linear(self.inputs, self.classes, bias=False)
    nn.init.zeros_(linear.weight)
    return nn.Sequential(nn.Flatten(), linear)

  def scores(self, final: nn.Module, reference: nn.Module) -> np.ndarray:
    """Y_i = (W_S - W_ref)[y_i, j_i] for every canary."""
    moved = _weights(final) - _weights(reference)
    index = torch.arange(self.canaries)
    return moved[index % self.classes, index // self.classes].numpy()


@dataclasses.dataclass(frozen=True)
class AuditResult:
  """What one audit found.

  Attributes:
    epsilon: the accountant's eps for the run as claimed.
    epsilon_lower_bound: eps_lb at `confidence`.
    ceiling: the largest eps_lb `guesses` guesses could certify.
    guesses: r.
    correct: W.
    kept: how many canaries were trained on (N).
  """

  epsilon: float
  epsilon_lower_bound: float
  ceiling: float
  guesses: int
  correct: int
  kept: int


def train(setup: CanarySetup, kept: np.ndarray, scheme: SamplingScheme,
          engine: clipping_lib.Engine, noise_multiplier: float,
          noise: torch.Generator, draws: torch.Generator) -> nn.Module:
  """DP-SGD over the kept canaries: S steps of `scheme`'s sampler, `engine`'s
  clipped sums, N(0, sigma^2 C^2) noise from `noise`; batches from `draws`.
  With no canary kept, the noise alone (an auditor's replay)."""
  images, labels = setup.images()
  mask = torch.from_numpy(kept)
  images, labels = images[mask], labels[mask]
  model = setup.model()
  step = dp_sgd.DPSGD(
      model, torch.optim.SGD(model.parameters(), lr=setup.batch_size),
      clip_norm=setup.clip_norm, noise_multiplier=noise_multiplier,
      expected_batch_size=setup.batch_size, generator=noise, clipping=engine)
  sampler = (sampling.Sampler(scheme, len(labels), setup.batch_size, draws)
             if len(labels) else None)
  for _ in range(setup.steps):
    # One micro-batch per logical batch; none at all in a replay.
    chunks = ([sampler.sample()] if sampler else [])
    step.step([(images[chunk.indices], labels[chunk.indices], chunk.weights)
               for chunk in chunks if len(chunk.indices)])
  return model


def audit_engine(setup: CanarySetup, scheme: SamplingScheme,
                 engine: clipping_lib.Engine, noise_multiplier: float,
                 secret: np.random.Generator) -> AuditResult:
  """One audit of `engine` under `scheme` at sigma: S_i, the batches and the
  noise all drawn from `secret`, which the auditor never sees."""
  kept = secret.random(setup.canaries) < 0.5
  noise, draws = (torch.Generator().manual_seed(int(seed))
                  for seed in secret.integers(2**62, size=2))
  final = train(setup, kept, scheme, engine, noise_multiplier, noise, draws)
  return evaluate(setup, setup.scores(final, setup.model()), kept,
                  claimed_epsilon(setup, int(kept.sum()), noise_multiplier,
                                  scheme))


def evaluate(setup: CanarySetup, scores: np.ndarray, kept: np.ndarray,
             claimed_epsilon: float) -> AuditResult:
  """The auditor's guesses from `scores`, and the bound they certify."""
  found = audit.bound(scores, kept, setup.guesses, setup.delta,
                      setup.confidence)
  return AuditResult(
      epsilon=claimed_epsilon,
      epsilon_lower_bound=found.epsilon_lower_bound, ceiling=found.ceiling,
      guesses=found.guesses, correct=found.correct, kept=int(kept.sum()))


def claimed_epsilon(setup: CanarySetup, kept: int, noise_multiplier: float,
                    scheme: SamplingScheme) -> float:
  """The accountant's eps for S steps of B over the N = `kept` canaries."""
  return accounting.epsilon(
      PrivacyTriplet(kept, setup.batch_size, noise_multiplier, setup.steps),
      setup.delta, scheme=scheme).epsilon


def _weights(model: nn.Module) -> torch.Tensor:
  return model[1].weight.detach()
