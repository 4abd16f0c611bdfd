"""The clipping engines behind one interface, and 'auto' resolved once."""

import pytest
import torch
from torch import nn

from tan_tune.errors import ConfigError
from tan_tune.training import clipping
from tan_tune.training import fast_clipping
from tan_tune.training import layer_clipping
from tan_tune.training import models
from tan_tune.training import trial_config


def _small_cnn():
  return models.build_model(models.ModelConfig("small-cnn"), (1, 8, 8), 10)


def _batch(b=6, k=2):
  torch.manual_seed(0)
  return torch.randn(b, k, 1, 8, 8), torch.randint(0, 10, (b,))


def test_every_engine_is_registered_and_named_in_configs():
  assert set(clipping.ENGINES) == {"fast", "vmap", "jl"}
  # 'auto' first, then the exact engines, then those that estimate norms.
  assert clipping.NAMES == ("auto", "fast", "vmap", "jl")
  assert [e.estimated for e in clipping.ENGINES.values()] == [
      False, False, True]


def test_each_engine_returns_the_same_result_type_and_sums():
  model = _small_cnn().double()  # float64: the engines sum in other orders.
  images, labels = _batch()
  images, weights = images.double(), torch.ones(6, dtype=torch.float64)
  results = {
      name: clipping.named(name).clipped_sum(model, images, labels, 0.5,
                                             weights, None)
      for name in ("fast", "vmap")}
  for result in results.values():
    assert isinstance(result, fast_clipping.ClippedSum)
    assert result.norms.shape == result.losses.shape == (6,)
  for name, g in results["vmap"].gradients.items():
    torch.testing.assert_close(results["fast"].gradients[name], g,
                               rtol=1e-8, atol=1e-12)
  jl = clipping.named("jl", projections=4)
  seed = jl.step_seed(torch.Generator().manual_seed(1))
  estimated = jl.clipped_sum(model, images, labels, 0.5, weights, seed)
  assert isinstance(estimated, fast_clipping.ClippedSum)
  assert estimated.gradients.keys() == results["vmap"].gradients.keys()


def test_only_an_estimating_engine_draws_from_the_step_stream():
  """The exact engines leave the secret stream as it is, so the noise is the
  same draw whichever of them computes."""
  for name in ("fast", "vmap"):
    generator = torch.Generator().manual_seed(3)
    assert clipping.named(name).step_seed(generator) is None
    assert torch.equal(generator.get_state(),
                       torch.Generator().manual_seed(3).get_state())
  generator = torch.Generator().manual_seed(3)
  assert isinstance(clipping.named("jl", 8).step_seed(generator), int)


def test_projections_belong_to_the_estimating_engine_only():
  with pytest.raises(ValueError, match="projections"):
    clipping.named("jl")
  with pytest.raises(ValueError, match="projections"):
    clipping.named("vmap", projections=8)
  with pytest.raises(ValueError, match="one of"):
    clipping.named("ghost")


@pytest.mark.parametrize("name", sorted(clipping.ENGINES))
def test_each_engine_carries_the_bound_its_runs_are_accounted_with(name):
  projections = 8 if clipping.ENGINES[name].estimated else None
  privacy = trial_config.PrivacyConfig(batch_size=64, noise_multiplier=2.0,
                                       steps=10, jl_projections=projections)
  engine = clipping.named(name, projections)
  assert engine.bound == privacy.scheme.bound
  assert engine.bound.exact == (not engine.estimated)


def test_auto_is_fast_where_it_covers_the_model_and_vmap_elsewhere(caplog):
  assert clipping.resolve("auto", _small_cnn()).name == "fast"
  uncovered = nn.Sequential(nn.Flatten(), nn.Linear(64, 10), nn.PReLU())
  with caplog.at_level("INFO"):
    assert clipping.resolve("auto", uncovered).name == "vmap"
  assert "does not cover 2.weight" in caplog.text
  with pytest.raises(ConfigError) as error:
    clipping.resolve("fast", uncovered)
  assert error.value.field == "clipping"
  assert "2.weight" in error.value.allowed
  with pytest.raises(ConfigError, match="one of"):
    clipping.resolve("ghost", uncovered)


def test_layer_clippers_register_themselves():
  names = [c.__name__ for c in layer_clipping.LAYER_CLIPPERS]
  assert sorted(names) == ["NormLayer", "PositionLayer", "StdConvLayer",
                           "WeightLayer"]
  assert fast_clipping.clip_class(nn.Linear(2, 2)).__name__ == "WeightLayer"
  assert fast_clipping.clip_class(nn.PReLU()) is None
