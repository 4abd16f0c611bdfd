"""Tests of JL clipping: the norm estimate and the re-weighted backward."""

import pytest
import torch
from torch import nn

from tan_tune.training import clipping
from tan_tune.training import dp_sgd
from tan_tune.training import jl_clipping
from tan_tune.training import models


def _setup(k=2, b=5, seed=0):
  torch.manual_seed(seed)
  model = models.build_model(models.ModelConfig("small-cnn"), (1, 8, 8),
                             10).double()
  images = torch.randn(b, k, 1, 8, 8, dtype=torch.float64)
  labels = torch.randint(0, 10, (b,))
  return model, images, labels


def _exact(model, images, labels):
  grads, _ = clipping.per_sample_gradients(model, images, labels)
  return grads


@pytest.mark.parametrize("k", [1, 3])
def test_the_backward_is_the_clipped_sum_for_the_drawn_probes(k):
  model, images, labels = _setup(k=k)
  grads = _exact(model, images, labels)
  replay = torch.Generator().manual_seed(7)
  r, clip_norm = 6, 0.05
  weights = torch.tensor([1.0, 1, 0, 1, 1])
  result = jl_clipping.jl_clipped_sum(model, images, labels, clip_norm, r, 7,
                                      weights)
  # The same probes, in the same order, against the exact per-sample g_i.
  dots = torch.zeros(5, r, dtype=torch.float64)
  for j in range(r):
    for name, p in model.named_parameters():
      probe = torch.randn(p.shape, generator=replay, dtype=p.dtype)
      dots[:, j] += (grads[name].flatten(1) * probe.flatten()).sum(1)
  norms = dots.pow(2).mean(1).sqrt()
  torch.testing.assert_close(result.norms.double(), norms, rtol=1e-5,
                             atol=0)
  factors = (clip_norm / norms.clamp(min=clip_norm)) * weights.double()
  assert (factors[weights > 0] < 1).any()  # Some are clipped.
  for name, g in grads.items():
    expected = torch.einsum("b,b...->...", factors, g)
    torch.testing.assert_close(result.gradients[name], expected, rtol=1e-7,
                               atol=1e-12)


@pytest.mark.slow
def test_m_squared_is_unbiased_and_concentrates_as_r_grows():
  """E[M_i^2] = |g_i|^2, relative variance 2 / r (chi-square)."""
  model, images, labels = _setup(k=1, b=3)
  grads = _exact(model, images, labels)
  exact = sum(g.flatten(1).pow(2).sum(1) for g in grads.values())
  spread = {}
  for r, count in ((4, 200), (64, 40)):
    draws = torch.stack([
        jl_clipping.jl_clipped_sum(model, images, labels, 1.0, r,
                                   seed).norms.double() ** 2
        for seed in range(count)]) / exact
    # s.e. of the mean sqrt(2 / (count r)): 0.05 and 0.028; 4 s.e.
    assert draws.mean(0).tolist() == pytest.approx([1.0] * 3, abs=0.2)
    spread[r] = draws.std(0).mean().item()
  assert spread[4] == pytest.approx((2 / 4) ** 0.5, rel=0.2)
  assert spread[64] == pytest.approx((2 / 64) ** 0.5, rel=0.2)


def test_every_pass_replays_the_same_dropout_masks():
  torch.manual_seed(3)
  model = nn.Sequential(nn.Flatten(), nn.Linear(16, 32), nn.Dropout(0.5),
                        nn.Linear(32, 4)).double()
  images = torch.randn(6, 1, 1, 4, 4, dtype=torch.float64)
  state = jl_clipping._random_state(images.device)  # pylint: disable=protected-access
  outputs = []
  for _ in range(2):
    with jl_clipping._replayed(state, images.device):  # pylint: disable=protected-access
      outputs.append(model(images.flatten(end_dim=1)))
  assert torch.equal(outputs[0], outputs[1])
  assert not torch.equal(outputs[0], model(images.flatten(end_dim=1)))


def test_an_empty_batch_gives_zero_sums():
  model, images, labels = _setup()
  result = jl_clipping.jl_clipped_sum(model, images[:0], labels[:0], 1.0, 4,
                                      0)
  assert all((g == 0).all() for g in result.gradients.values())


def test_a_dp_step_uses_one_set_of_probes_for_all_its_micro_batches():
  """Micro-batched or not, the JL step is the same: the probes belong to the
  step, drawn once from the noise generator."""
  model, images, labels = _setup(b=6)
  updates = []
  for chunks in ([slice(0, 6)], [slice(0, 2), slice(2, 6)]):
    copy = models.build_model(models.ModelConfig("small-cnn"), (1, 8, 8),
                              10).double()
    copy.load_state_dict(model.state_dict())
    step = dp_sgd.DPSGD(copy, torch.optim.SGD(copy.parameters(), lr=1.0),
                        clip_norm=0.05, noise_multiplier=1.0,
                        expected_batch_size=6,
                        generator=torch.Generator().manual_seed(3),
                        clipping="jl", jl_projections=4)
    step.step([(images[c], labels[c], None) for c in chunks])
    updates.append(torch.cat([p.detach().flatten()
                              for p in copy.parameters()]))
  torch.testing.assert_close(updates[0], updates[1], rtol=1e-9, atol=1e-12)
