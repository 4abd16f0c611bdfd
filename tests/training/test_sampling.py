"""Tests of the samplers and of micro-batching."""

import pytest
import torch

from tan_tune.privacy.sampling_scheme import SamplingScheme
from tan_tune.training import sampling


def _sampler(name, n, b, seed, **scheme):
  return sampling.Sampler(SamplingScheme(name, **scheme), n, b,
                          torch.Generator().manual_seed(seed))


def _real(batch):
  """The drawn rows of a batch, padding left out."""
  if batch.weights is None:
    return batch.indices
  return batch.indices[batch.weights > 0]


def test_poisson_batch_sizes_have_mean_b_and_variance_b_one_minus_q():
  n, b, draws = 2000, 200, 3000
  sampler = _sampler("poisson", n, b, 0)
  sizes = torch.tensor([len(sampler.sample().indices)
                        for _ in range(draws)]).double()
  q = b / n
  # Standard errors: mean sqrt(B(1-q)/draws) ~ 0.24; variance ~ 2.6.
  assert sizes.mean().item() == pytest.approx(b, abs=1.0)
  assert sizes.var().item() == pytest.approx(b * (1 - q), rel=0.1)


def test_each_example_is_drawn_with_probability_q():
  n, b = 50, 10
  sampler = _sampler("poisson", n, b, 1)
  counts = torch.zeros(n)
  for _ in range(4000):
    counts[sampler.sample().indices] += 1
  frequencies = counts / 4000
  assert frequencies.mean().item() == pytest.approx(0.2, abs=0.01)
  assert (frequencies - 0.2).abs().max().item() < 0.04  # ~6 standard errors.


@pytest.mark.parametrize("name", ["poisson", "truncated-poisson"])
def test_poisson_over_a_universe_draws_present_rows_at_b_over_n(name):
  # 30 rows present of a universe of 50: each at q = 10 / 50, the absent
  # 20 never, as if the universe were sampled.
  sampler = sampling.Sampler(SamplingScheme(name), 50, 10,
                             torch.Generator().manual_seed(1), rows=30)
  assert sampler.sampling_rate == 10 / 50
  counts = torch.zeros(50)
  for _ in range(4000):
    batch = sampler.sample()
    counts[_real(batch)] += 1
  frequencies = counts / 4000
  assert (frequencies[:30] - 0.2).abs().max().item() < 0.04
  assert not frequencies[30:].any()


@pytest.mark.parametrize("name", ["fixed", "fixed-with-replacement"])
def test_a_fixed_size_sampler_has_no_universe(name):
  with pytest.raises(ValueError, match="no universe"):
    sampling.Sampler(SamplingScheme(name), 50, 10, torch.Generator(), rows=30)


def test_poisson_batches_can_be_empty():
  sampler = _sampler("poisson", 1000, 1, 2)
  sizes = [len(sampler.sample().indices) for _ in range(200)]
  assert 0 in sizes  # P(empty) = (1 - 1/1000)^1000 ~ 0.37.


def test_fixed_gives_exactly_b_distinct_indices_uniformly():
  n, b = 40, 8
  sampler = _sampler("fixed", n, b, 3)
  counts = torch.zeros(n)
  for _ in range(3000):
    batch = sampler.sample()
    assert batch.weights is None
    assert len(batch.indices) == len(batch.indices.unique()) == b
    assert ((0 <= batch.indices) & (batch.indices < n)).all()
    counts[batch.indices] += 1
  # Each example with probability B / N = 0.2: s.e. of a frequency ~ 0.0073.
  assert ((counts / 3000 - 0.2).abs() < 0.04).all()


def test_fixed_with_replacement_gives_exactly_b_draws_with_repeats():
  n, b = 10, 8
  sampler = _sampler("fixed-with-replacement", n, b, 4)
  repeats = 0
  for _ in range(200):
    batch = sampler.sample()
    assert len(batch.indices) == b and batch.weights is None
    repeats += len(batch.indices) > len(batch.indices.unique())
  assert repeats > 150  # P(no repeat) = 10!/(2! 10^8) ~ 0.018 per draw.


def test_truncated_never_exceeds_its_cap_and_pads_to_it():
  n, b = 400, 100
  sampler = _sampler("truncated-poisson", n, b, 5, truncation_stds=0.5)
  assert sampler.cap == 105  # B + floor(0.5 sqrt(B)).
  truncated = 0
  for _ in range(300):
    batch = sampler.sample()
    assert len(batch.indices) == len(batch.weights) == 105
    real = _real(batch)
    assert len(real) <= 105 and len(real.unique()) == len(real)
    # Padding rows come last and carry weight 0.
    assert torch.equal(batch.weights[:len(real)], torch.ones(len(real)))
    truncated += len(real) == 105
  assert truncated > 50  # P(Poisson(100) > 105) ~ 0.27 (binomial: ~ 0.23).


def test_truncated_matches_poisson_below_its_cap():
  """Same generator state: the same draw while the batch fits the cap."""
  poisson = _sampler("poisson", 1000, 50, 6)
  truncated = _sampler("truncated-poisson", 1000, 50, 6, truncation_stds=20)
  for _ in range(20):
    expected = poisson.sample().indices
    assert torch.equal(_real(truncated.sample()), expected)


@pytest.mark.parametrize(
    "name", ["poisson", "truncated-poisson", "fixed", "fixed-with-replacement"])
def test_every_sampler_resumes_from_its_generator_state(name):
  sampler = _sampler(name, 100, 10, 7)
  for _ in range(3):
    sampler.sample()
  state = sampler.generator.get_state()
  expected = [sampler.sample() for _ in range(4)]
  resumed = sampling.Sampler(SamplingScheme(name), 100, 10, torch.Generator())
  resumed.generator.set_state(state)
  for batch in expected:
    again = resumed.sample()
    assert torch.equal(again.indices, batch.indices)
    assert (again.weights is None) == (batch.weights is None)


def test_shards_split_rows_and_weights_alike():
  batch = sampling.LogicalBatch(torch.arange(5), torch.tensor([1.0, 1, 1, 0, 0]))
  first, second = batch.shard(0, 2), batch.shard(1, 2)
  assert first.indices.tolist() == [0, 2, 4] and second.indices.tolist() == [1, 3]
  assert first.weights.tolist() == [1, 1, 0] and second.weights.tolist() == [1, 0]


def test_micro_batches_partition_the_batch_in_order():
  batch = sampling.LogicalBatch(torch.arange(10), torch.arange(10.0))
  chunks = sampling.micro_batches(batch, 4)
  assert [len(c.indices) for c in chunks] == [4, 4, 2]
  assert torch.equal(torch.cat([c.indices for c in chunks]), batch.indices)
  assert torch.equal(torch.cat([c.weights for c in chunks]), batch.weights)
  assert sampling.micro_batches(sampling.LogicalBatch(torch.arange(0)), 4) == []


def test_rejects_a_batch_larger_than_the_data():
  with pytest.raises(ValueError, match="batch_size"):
    _sampler("fixed", 10, 11, 0)
