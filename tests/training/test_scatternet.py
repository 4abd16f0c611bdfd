"""Tests of the ScatterNet classifier: kymatio's transform, DP-trainable."""

from kymatio.scattering2d.frontend import torch_frontend
import pytest
import torch
from torch import nn

from tan_tune.errors import ConfigError
from tan_tune.training import clipping
from tan_tune.training import models
from tan_tune.training import scatternet
from clipping_reference import assert_matches_vmap


@pytest.mark.parametrize("shape,scales,channels", [
    ((1, 28, 28), 2, 81), ((3, 32, 30), 2, 81), ((1, 8, 8), 2, 81),
    ((1, 28, 28), 3, 217), ((2, 17, 24), 3, 217)])
def test_the_transform_equals_kymatios(shape, scales, channels):
  """Same filters, same cascade, same channel order, any image size and
  number of scales: K = 1 + J L + L^2 J (J - 1) / 2 channels at H / 2^J."""
  torch.manual_seed(0)
  images = torch.rand(5, *shape)
  theirs = torch_frontend.ScatteringTorch2D(J=scales, shape=shape[1:], L=8)
  expected = theirs(images).flatten(1, 2)
  ours = scatternet.Scattering(shape, scales)(images)
  assert ours.shape == (5, channels * shape[0], shape[1] // 2**scales,
                        shape[2] // 2**scales)
  torch.testing.assert_close(ours, expected, rtol=0, atol=1e-5)


def test_chunks_do_not_change_the_features():
  images = torch.rand(70, 1, 28, 28)
  transform = scatternet.Scattering((1, 28, 28))
  torch.testing.assert_close(
      transform(images),
      torch.cat([transform(images[:1]), transform(images[1:])]))


def test_only_the_norm_and_the_linear_layer_learn():
  """Tramer & Boneh's classifier: 81 x 7 x 7 features on Fashion-MNIST."""
  model = models.build_model(
      models.ModelConfig("scatternet", num_groups=27), (1, 28, 28), 10)
  assert dict((n, tuple(p.shape)) for n, p in model.named_parameters()) == {
      "1.weight": (81,), "1.bias": (81,),
      "3.weight": (10, 81 * 7 * 7), "3.bias": (10,)}
  assert model[1].num_groups == 27
  assert not list(model[0].parameters())
  assert model(torch.rand(2, 1, 28, 28)).shape == (2, 10)
  # The default 16 groups is not a divisor of 81: the largest one below.
  default = models.build_model(models.ModelConfig("scatternet"), (1, 8, 8), 10)
  assert default[1].num_groups == 9


def test_the_cnn_head_is_tramer_and_bonehs_on_the_same_features():
  """Two 3x3 convolutions (16 channels at stride 2, then 32) and a hidden
  layer of 32 above the same GroupNorm; only they learn."""
  model = models.build_model(
      models.ModelConfig("scatternet-cnn", num_groups=27), (1, 28, 28), 10)
  assert dict((n, tuple(p.shape)) for n, p in model.named_parameters()) == {
      "1.weight": (81,), "1.bias": (81,),
      "2.weight": (16, 81, 3, 3), "2.bias": (16,),
      "4.weight": (32, 16, 3, 3), "4.bias": (32,),
      "7.weight": (32, 32 * 4 * 4), "7.bias": (32,),
      "9.weight": (10, 32), "9.bias": (10,)}
  assert not list(model[0].parameters())
  assert model(torch.rand(2, 1, 28, 28)).shape == (2, 10)
  # Odd feature maps round up: 3x3 features (12x12 images) give 2x2.
  small = scatternet.scatternet((3, 12, 14), 5, 9, cnn_head=True)
  assert small(torch.rand(2, 3, 12, 14)).shape == (2, 5)
  assert small[7].in_features == 32 * 2 * 2


@pytest.mark.parametrize("name", ["scatternet", "scatternet-cnn"])
def test_fast_clipping_covers_it_and_equals_the_vmap_path(name):
  """'auto' picks fast clipping; per-sample gradients by vmap run through
  the transform (kymatio's own in-place FFTs would not) and agree."""
  torch.manual_seed(1)
  model = models.build_model(
      models.ModelConfig(name, num_groups=27), (1, 28, 28), 10)
  assert isinstance(clipping.resolve("auto", model), clipping.Fast)
  images = torch.rand(4, 2, 1, 28, 28, dtype=torch.float64)
  assert_matches_vmap(model.double(), images, torch.randint(10, (4,)), 0.5)


def test_the_transform_moves_with_the_model():
  model = scatternet.scatternet((1, 8, 8), 10, 9).double()
  assert all(b.dtype == torch.float64 for b in model.buffers())
  assert model(torch.rand(2, 1, 8, 8, dtype=torch.float64)).dtype == (
      torch.float64)
  assert isinstance(model[1], nn.GroupNorm)


@pytest.mark.parametrize("shape,scales,least", [
    ((1, 4, 28), 2, "5x5"), ((3, 2, 2), 2, "5x5"), ((1, 8, 28), 3, "9x9")])
def test_images_too_small_to_pad_are_refused(shape, scales, least):
  with pytest.raises(ConfigError) as error:
    models.build_model(models.ModelConfig("scatternet", scales=scales), shape,
                       10)
  assert error.value.field == "model.name"
  assert f"at least {least}" in error.value.allowed


@pytest.mark.parametrize("name,scales", [("dp-cnn", 3), ("scatternet", 0),
                                         ("scatternet", True)])
def test_scales_are_a_scatternets_and_positive(name, scales):
  with pytest.raises(ConfigError) as error:
    models.ModelConfig(name, scales=scales)
  assert error.value.field == "model.scales"


def test_the_fixed_filters_are_not_saved_with_the_weights():
  model = scatternet.scatternet((1, 8, 8), 10, 9)
  assert set(model.state_dict()) == {"1.weight", "1.bias", "3.weight",
                                     "3.bias"}
  assert set(dict(model.named_buffers())) == {
      "0.phi0", "0.phi1", "0.psi0_0", "0.psi1_0"}

