"""The audit as a test of the DP-SGD engine: every clipping engine under
every sampler it is accounted for, correct, weak and deliberately broken.

The setting (`CanarySetup`'s defaults): m = 4000 Dirac canaries, about
N = 2000 kept, B = 1000 (q about 1/2: at a lower q the number of steps a
kept canary is sampled in varies more, which costs the audit power), S = 25,
r = 200 guesses, delta = 1e-5, 95% confidence: a ceiling of 4.08.

sigma is each scheme's own accountant's for eps = 1 at N = 2000 (the
`SIGMA` table; each test checks the claim it makes). A broken run trains
at sigma / NOISE_DIVISOR while claiming eps = 1. A canary's score sees only
its own contribution, about C whenever it is sampled, so the audit judges
every sampler as Poisson sampling: fixed-size batches under add/remove-one
adjacency are charged for the example a canary displaces too (sensitivity
2C, sigma twice Poisson's), and with replacement for an example drawn
several times (the bound of Birrell et al., sigma 14x Poisson's at this q).
Their quarter-noise runs therefore divide by 4 times that factor: the same
noise, 2.58, as Poisson's. The weak runs use Poisson's sigma for eps = 50
(0.547) where a sampler's own claim at that power is far above 50.
"""

import dataclasses
from typing import ClassVar

import numpy as np
import pytest
import torch

from tan_tune.privacy.sampling_scheme import SamplingScheme
from tan_tune.training import clipping
from tan_tune.training import engine_audit

SETUP = engine_audit.CanarySetup()
CLAIMED = 1.0
PROJECTIONS = 32
# sampler: (sigma for eps = 1, sigma of the weak run, noise divisor); JL
# clipping's own accountant asks sigma 10.08 for eps = 1, 0.562 for 50.
SIGMA = {
    "poisson": (10.33, 0.547, 4),
    "truncated-poisson": (9.51, 0.522, 4),
    "fixed": (20.65, 1.19, 8),
    "fixed-with-replacement": (144.2, 0.547, 56),
}
JL_SIGMA = (10.08, 0.562, 4)
CASES = [(engine, sampler) for engine in ("fast", "vmap")
         for sampler in SIGMA] + [("jl", "poisson")]


def _sigmas(engine: str, sampler: str) -> tuple[float, float, float]:
  return JL_SIGMA if engine == "jl" else SIGMA[sampler]


def test_a_canary_moves_only_its_own_column_by_c():
  """Each canary's clipped gradient lies in column j_i of W with norm C,
  (1 - 1/K) / |p - e_y| of it on (y_i, j_i): the score reads one canary."""
  images, labels = SETUP.images()
  chosen = torch.tensor([0, 10, 25])  # Columns 0, 1 and 2.
  result = clipping.Vmap().clipped_sum(
      SETUP.model(), images[chosen], labels[chosen], SETUP.clip_norm,
      torch.ones(3), None)
  assert result.norms.min() > 50 * SETUP.clip_norm  # Clipping binds.
  (moved,) = result.gradients.values()
  assert moved.abs().sum(dim=0).nonzero().flatten().tolist() == [0, 1, 2]
  assert moved.norm() == pytest.approx(SETUP.clip_norm * np.sqrt(3), rel=1e-5)
  final = SETUP.model()
  final[1].weight.data -= moved  # SGD at lr = B on their clipped sum.
  scores = SETUP.scores(final, SETUP.model())
  k = SETUP.classes
  share = (1 - 1 / k) / np.sqrt((1 - 1 / k)**2 + (k - 1) / k**2)
  assert scores[chosen.numpy()] == pytest.approx(
      [SETUP.clip_norm * share] * 3, rel=1e-4)
  assert not np.any(scores[3 * k:])  # Other columns never move.


def test_the_auditor_guesses_the_highest_scores_in_and_the_lowest_out():
  kept = np.arange(SETUP.canaries) % 2 == 0
  result = engine_audit.evaluate(SETUP, kept.astype(float), kept, 1.0)
  assert (result.guesses, result.correct) == (200, 200)
  assert result.epsilon_lower_bound == result.ceiling > 4


def _engine(name: str) -> clipping.Engine:
  return clipping.named(
      name, PROJECTIONS if clipping.ENGINES[name].estimated else None)


def _scheme(engine: str, sampler: str) -> SamplingScheme:
  return SamplingScheme(sampler, bound=_engine(engine).bound)


@dataclasses.dataclass(frozen=True)
class _SkipsClipping(clipping.Engine):
  """A broken engine: another engine's sums with C a million times larger,
  while DPSGD's noise stays at sigma C."""

  name: ClassVar[str] = "skips-clipping"
  inner: clipping.Engine = clipping.Vmap()

  def __post_init__(self):
    pass  # r, if any, is the inner engine's.

  def step_seed(self, generator):
    return self.inner.step_seed(generator)

  def clipped_sum(self, model, images, labels, clip_norm, weights, step_seed):
    return self.inner.clipped_sum(model, images, labels, clip_norm * 1e6,
                                  weights, step_seed)


def _secrets(seed: int):
  """The draws an auditor never sees: S_i, then the batches' generator."""
  rng = np.random.default_rng(seed)
  kept = rng.random(SETUP.canaries) < 0.5
  return kept, torch.Generator().manual_seed(int(rng.integers(2**62)))


def _broken_run(engine: str, sampler: str, *, noise_divisor: float = 1.0,
                skip_clipping: bool = False,
                public_noise_seed: int | None = None):
  """A run that claims sigma (eps = CLAIMED) but trains something else."""
  sigma = _sigmas(engine, sampler)[0]
  scheme = _scheme(engine, sampler)
  trained = (_SkipsClipping(inner=_engine(engine)) if skip_clipping
             else _engine(engine))
  kept, draws = _secrets(7)
  noise_seed = 11 if public_noise_seed is None else public_noise_seed
  final = engine_audit.train(SETUP, kept, scheme, trained,
                             sigma / noise_divisor,
                             torch.Generator().manual_seed(noise_seed), draws)
  reference = SETUP.model()
  if public_noise_seed is not None:
    # The auditor knows the seed: it replays the noise with no data at all.
    reference = engine_audit.train(
        SETUP, np.zeros(SETUP.canaries, bool), scheme, trained, sigma,
        torch.Generator().manual_seed(public_noise_seed), torch.Generator())
  claimed = engine_audit.claimed_epsilon(SETUP, int(kept.sum()), sigma, scheme)
  return engine_audit.evaluate(SETUP, SETUP.scores(final, reference), kept,
                               claimed)


def _correct_run(engine: str, sampler: str, sigma: float, seed: int):
  return engine_audit.audit_engine(SETUP, _scheme(engine, sampler),
                                   _engine(engine), sigma,
                                   np.random.default_rng(seed))


@pytest.mark.slow
@pytest.mark.parametrize("engine, sampler", CASES)
def test_a_correct_engine_stays_below_its_claimed_epsilon(engine, sampler):
  result = _correct_run(engine, sampler, _sigmas(engine, sampler)[0], seed=3)
  assert result.epsilon == pytest.approx(CLAIMED, abs=0.05)
  assert result.epsilon_lower_bound < result.epsilon


@pytest.mark.slow
@pytest.mark.parametrize("engine, sampler", CASES)
def test_the_audit_has_power_at_a_weak_setting(engine, sampler):
  result = _correct_run(engine, sampler, _sigmas(engine, sampler)[1], seed=5)
  assert result.epsilon >= 49
  assert result.epsilon_lower_bound >= 0.75 * result.ceiling > 0


@pytest.mark.slow
@pytest.mark.parametrize("engine, sampler", CASES)
def test_skipped_clipping_is_caught(engine, sampler):
  result = _broken_run(engine, sampler, skip_clipping=True)
  assert result.epsilon_lower_bound > result.epsilon


@pytest.mark.slow
@pytest.mark.parametrize("engine, sampler", CASES)
def test_a_public_noise_seed_is_caught(engine, sampler):
  result = _broken_run(engine, sampler, public_noise_seed=1234)
  assert result.epsilon_lower_bound > result.epsilon


@pytest.mark.slow
@pytest.mark.parametrize("engine, sampler", CASES)
def test_a_quarter_of_the_noise_is_caught(engine, sampler):
  result = _broken_run(engine, sampler,
                       noise_divisor=_sigmas(engine, sampler)[2])
  assert result.epsilon_lower_bound > result.epsilon
