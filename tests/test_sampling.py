"""Tests of Poisson sampling and micro-batching."""

import pytest
import torch

from tan_tune.training import sampling


def test_batch_sizes_have_mean_b_and_variance_b_one_minus_q():
  n, b, draws = 2000, 200, 3000
  sampler = sampling.PoissonSampler(n, b, torch.Generator().manual_seed(0))
  sizes = torch.tensor([len(sampler.sample()) for _ in range(draws)]).double()
  q = b / n
  # Standard errors: mean sqrt(B(1-q)/draws) ~ 0.24; variance ~ 2.6.
  assert sizes.mean().item() == pytest.approx(b, abs=1.0)
  assert sizes.var().item() == pytest.approx(b * (1 - q), rel=0.1)


def test_each_example_is_drawn_with_probability_q():
  n, b = 50, 10
  sampler = sampling.PoissonSampler(n, b, torch.Generator().manual_seed(1))
  counts = torch.zeros(n)
  for _ in range(4000):
    counts[sampler.sample()] += 1
  frequencies = counts / 4000
  assert frequencies.mean().item() == pytest.approx(0.2, abs=0.01)
  assert (frequencies - 0.2).abs().max().item() < 0.04  # ~6 standard errors.


def test_batches_can_be_empty():
  sampler = sampling.PoissonSampler(1000, 1, torch.Generator().manual_seed(2))
  sizes = [len(sampler.sample()) for _ in range(200)]
  assert 0 in sizes  # P(empty) = (1 - 1/1000)^1000 ~ 0.37.


def test_same_generator_state_same_batches():
  a = sampling.PoissonSampler(100, 10, torch.Generator().manual_seed(3))
  b = sampling.PoissonSampler(100, 10, torch.Generator().manual_seed(3))
  for _ in range(5):
    assert torch.equal(a.sample(), b.sample())


def test_micro_batches_partition_the_batch_in_order():
  indices = torch.arange(10)
  chunks = sampling.micro_batches(indices, 4)
  assert [len(c) for c in chunks] == [4, 4, 2]
  assert torch.equal(torch.cat(chunks), indices)
  assert sampling.micro_batches(torch.arange(0), 4) == []


def test_rejects_a_batch_larger_than_the_data():
  with pytest.raises(ValueError, match="batch_size"):
    sampling.PoissonSampler(10, 11, torch.Generator())
