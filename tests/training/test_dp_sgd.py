"""Tests of per-sample clipping with AugMult and of the noise of a DP step."""

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from tan_tune.training import clipping as clipping_lib
from tan_tune.training import dp_sgd
from tan_tune.training import models


def _naive_clipped_sum(model, images, labels, clip_norm):
  """One example at a time with ordinary autograd: eq. 5 written as a loop."""
  params = [p for p in model.parameters() if p.requires_grad]
  total = [torch.zeros_like(p) for p in params]
  for copies, label in zip(images, labels):
    loss = F.cross_entropy(model(copies), label.expand(copies.shape[0]))
    grads = torch.autograd.grad(loss, params)
    norm = torch.sqrt(sum(g.pow(2).sum() for g in grads))
    factor = min(1.0, clip_norm / norm.item())
    for t, g in zip(total, grads):
      t += factor * g
  return dict(zip([n for n, p in model.named_parameters() if p.requires_grad],
                  total))


def _dp(model, clip_norm=1.0, sigma=0.0, batch=4, clipping="vmap"):
  optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
  return dp_sgd.DPSGD(model, optimizer, clip_norm, sigma, batch,
                      torch.Generator().manual_seed(0), clipping=clipping)


@pytest.mark.parametrize("k", [1, 4])
@pytest.mark.parametrize("name, shape, clipping", [
    ("wrn-16-4", (3, 16, 16), "vmap"),
    ("wrn-16-4", (3, 16, 16), "fast"),
    # timm's, with GroupNormAct; seconds each.
    pytest.param("resnet18", (3, 32, 32), "vmap", marks=pytest.mark.slow),
    pytest.param("resnet18", (3, 32, 32), "fast", marks=pytest.mark.slow),
    ("small-cnn", (1, 8, 8), "vmap"),
    ("small-cnn", (1, 8, 8), "fast"),
])
def test_augmult_clipping_equals_a_naive_loop(name, shape, k, clipping):
  """In float64 (see test_models' per-sample test): float32's gap between
  two summation orders depends on the CPU, float64's is rounding."""
  torch.manual_seed(0)
  model = models.build_model(models.ModelConfig(name), shape, 10).double()
  images = torch.randn(3, k, *shape, dtype=torch.float64)
  labels = torch.tensor([1, 5, 7])
  # A small C so that every example is clipped, and a large one so none is.
  for clip_norm in (1e-3, 1e6):
    total, stats = _dp(model, clip_norm, clipping=clipping).summed_gradient(
        [(images, labels, None)])
    expected = _naive_clipped_sum(model, images, labels, clip_norm)
    assert stats.examples == 3
    for param_name, value in expected.items():
      torch.testing.assert_close(total[param_name], value, rtol=1e-8,
                                 atol=1e-12)


def test_every_contribution_has_norm_at_most_c_and_exactly_c_when_larger():
  torch.manual_seed(1)
  model = models.build_model(models.ModelConfig("small-cnn"), (1, 8, 8), 10)
  images = torch.randn(16, 2, 1, 8, 8) * torch.logspace(-2, 1, 16).view(
      -1, 1, 1, 1, 1)
  labels = torch.randint(0, 10, (16,))
  grads, _ = clipping_lib.per_sample_gradients(model, images, labels)
  _, unclipped = clipping_lib.clip_factors(grads, float("inf"))
  clip_norm = unclipped.median().item()  # Half the examples are clipped.
  factors, norms = clipping_lib.clip_factors(grads, clip_norm)
  clipped = {name: g * factors.view(-1, *[1] * (g.ndim - 1))
             for name, g in grads.items()}
  clipped_norms = torch.sqrt(sum(g.flatten(1).pow(2).sum(1)
                                 for g in clipped.values()))
  larger = norms > clip_norm
  assert larger.any() and (~larger).any()
  torch.testing.assert_close(clipped_norms[larger],
                             torch.full_like(clipped_norms[larger], clip_norm))
  torch.testing.assert_close(clipped_norms[~larger], norms[~larger])
  assert (clipped_norms <= clip_norm * (1 + 1e-6)).all()


def test_zero_gradient_update_has_std_lr_sigma_c_over_b():
  # x = 0 and no bias: every per-sample gradient of a linear model is zero,
  # so the update is the noise alone: std lr sigma C / B.
  model = nn.Sequential(nn.Flatten(), nn.Linear(16, 200, bias=False))
  nn.init.zeros_(model[1].weight)
  lr, sigma, clip_norm, batch = 0.5, 2.0, 3.0, 8
  optimizer = torch.optim.SGD(model.parameters(), lr=lr)
  step = dp_sgd.DPSGD(model, optimizer, clip_norm, sigma, batch,
                      torch.Generator().manual_seed(0))
  step.step([(torch.zeros(batch, 1, 1, 4, 4),
              torch.zeros(batch, dtype=torch.long), None)])
  update = model[1].weight.detach().flatten()  # 3200 draws.
  expected = lr * sigma * clip_norm / batch
  assert update.mean().item() == pytest.approx(0, abs=4 * expected / 3200**0.5)
  assert update.std().item() == pytest.approx(expected, rel=0.05)  # ~4 s.e.


@pytest.mark.parametrize("clipping", ("fast", "vmap"))
def test_micro_batches_give_the_same_update_as_one_batch(clipping):
  torch.manual_seed(2)
  images = torch.randn(10, 2, 1, 8, 8)
  labels = torch.randint(0, 10, (10,))
  updates = []
  for chunks in ([slice(0, 10)], [slice(0, 3), slice(3, 7), slice(7, 10)]):
    torch.manual_seed(3)
    model = models.build_model(models.ModelConfig("small-cnn"), (1, 8, 8), 10)
    _dp(model, batch=10, clipping=clipping).step(
        (images[c], labels[c], None) for c in chunks)
    updates.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
  torch.testing.assert_close(updates[0], updates[1], rtol=1e-5, atol=1e-7)


def test_non_private_step_is_plain_sgd_on_the_mean_over_copies():
  torch.manual_seed(4)  # float64: the two sum in other orders.
  model = models.build_model(models.ModelConfig("small-cnn"), (1, 8, 8),
                             10).double()
  images = torch.randn(6, 3, 1, 8, 8, dtype=torch.float64)
  labels = torch.randint(0, 10, (6,))
  total, stats = _dp(model, clip_norm=None).summed_gradient([(images, labels, None)])
  expected = _naive_clipped_sum(model, images, labels, clip_norm=float("inf"))
  assert stats.clipped == 0
  for name, value in expected.items():
    torch.testing.assert_close(total[name], value, rtol=1e-8, atol=1e-12)


def test_noise_without_clipping_is_refused():
  model = nn.Linear(2, 2)
  with pytest.raises(ValueError, match="sensitivity"):
    dp_sgd.DPSGD(model, torch.optim.SGD(model.parameters(), lr=1), None, 1.0, 4,
                 torch.Generator())


def test_both_clipping_methods_take_the_same_noisy_step():
  """Same seeds, same data: 'fast' and 'vmap' give the same weights."""
  torch.manual_seed(5)
  images = torch.randn(6, 2, 1, 8, 8)
  labels = torch.randint(0, 10, (6,))
  weights = []
  for clipping in ("fast", "vmap"):
    torch.manual_seed(6)
    model = models.build_model(models.ModelConfig("small-cnn"), (1, 8, 8), 10)
    dp = _dp(model, clip_norm=0.5, sigma=1.0, batch=6, clipping=clipping)
    stats = dp.step([(images[:4], labels[:4], None),
                     (images[4:], labels[4:], None)])
    weights.append(torch.cat([p.detach().flatten()
                              for p in model.parameters()]))
    assert stats.examples == 6
  torch.testing.assert_close(weights[0], weights[1], rtol=1e-5, atol=1e-7)


def test_fast_clipping_refuses_a_model_it_does_not_cover():
  model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
  with pytest.raises(ValueError, match="does not cover"):
    _dp(model, clipping="fast")


@pytest.mark.parametrize("clipping", [*("fast", "vmap"), None])
def test_zero_weight_rows_contribute_nothing(clipping):
  """A capped sampler's padding: the batch with padding rows of weight 0
  gives the sums, counts and losses of the batch without them."""
  torch.manual_seed(7)  # float64: with padding the sums run in other orders.
  model = models.build_model(models.ModelConfig("small-cnn"), (1, 8, 8),
                             10).double()
  images = torch.randn(7, 2, 1, 8, 8, dtype=torch.float64)
  labels = torch.randint(0, 10, (7,))
  weights = torch.tensor([1.0, 1, 1, 1, 1, 0, 0], dtype=torch.float64)
  dp = _dp(model, clip_norm=None if clipping is None else 0.1,
           clipping=clipping or "vmap")
  padded, padded_stats = dp.summed_gradient([(images, labels, weights)])
  real, real_stats = dp.summed_gradient([(images[:5], labels[:5], None)])
  assert padded_stats.examples == real_stats.examples == 5
  assert padded_stats.clipped == real_stats.clipped
  assert padded_stats.loss_sum == pytest.approx(real_stats.loss_sum, rel=1e-6)
  for name, value in real.items():
    torch.testing.assert_close(padded[name], value, rtol=1e-8, atol=1e-12)
