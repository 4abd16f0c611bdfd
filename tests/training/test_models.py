"""Tests for tan_tune.training.models: shapes, DP-compatibility and per-sample grads."""

import functools

import pytest
import torch
from torch import nn

from tan_tune.errors import ConfigError
from tan_tune.training import models

# (name, input_shape) pairs that every structural test runs on. nf_resnet50 is
# the paper's ImageNet model (appendix B) and builds in a few seconds at 32x32.
_BUILDS = (
    ("wrn-16-4", (3, 32, 32)),
    ("wrn-16-4", (1, 8, 8)),
    ("small-cnn", (1, 8, 8)),
    ("dp-cnn", (1, 28, 28)),
    ("dp-cnn-gn", (1, 28, 28)),
    ("resnet18", (3, 32, 32)),
    ("nf_resnet50", (3, 32, 32)),
)
_NUM_CLASSES = 10


@functools.cache
def _build(name: str, input_shape: tuple[int, int, int],
           norm_before_activation: bool = False) -> nn.Module:
  # Cached because building and checking the larger models takes seconds.
  torch.manual_seed(0)
  config = models.ModelConfig(
      name, norm_before_activation=norm_before_activation)
  return models.build_model(config, input_shape, _NUM_CLASSES)


@pytest.mark.parametrize(("name", "input_shape"), _BUILDS)
def test_output_shape(name, input_shape):
  logits = _build(name, input_shape)(torch.randn(3, *input_shape))
  assert logits.shape == (3, _NUM_CLASSES)


@pytest.mark.parametrize(("name", "input_shape"), _BUILDS)
def test_no_batch_norm_and_no_inplace_modules(name, input_shape):
  for module in _build(name, input_shape).modules():
    assert not isinstance(module, nn.modules.batchnorm._BatchNorm), module
    assert not getattr(module, "inplace", False), module


def test_wide_resnet_uses_group_norm_with_16_groups():
  norms = [m for m in _build("wrn-16-4", (3, 32, 32)).modules()
           if isinstance(m, nn.GroupNorm)]
  assert norms
  assert all(m.num_groups == 16 for m in norms)


def test_group_count_falls_back_to_a_divisor():
  config = models.ModelConfig("wrn-10-1", num_groups=12)
  model = models.build_model(config, (1, 8, 8), _NUM_CLASSES)
  # 16, 32 and 64 channels: 12 divides none, 8 is the largest divisor below.
  assert {m.num_groups for m in model.modules()
          if isinstance(m, nn.GroupNorm)} == {8}


def _first_norm_act_order(model: nn.Module) -> list[type[nn.Module]]:
  """Types of the first norm and activation modules in forward-call order."""
  calls = []
  handles = [
      m.register_forward_hook(lambda m, *_: calls.append(type(m)))
      for m in model.modules() if isinstance(m, (nn.GroupNorm, nn.ReLU))
  ]
  model(torch.randn(1, 1, 8, 8))
  for handle in handles:
    handle.remove()
  return calls[:2]


@pytest.mark.parametrize("name", ["wrn-10-1", "small-cnn"])
def test_order_switch_changes_forward_order(name):
  act_first = _first_norm_act_order(_build(name, (1, 8, 8), False))
  norm_first = _first_norm_act_order(_build(name, (1, 8, 8), True))
  assert act_first == [nn.ReLU, nn.GroupNorm]
  assert norm_first == [nn.GroupNorm, nn.ReLU]


def test_order_switch_keeps_parameter_names():
  act_first = _build("wrn-10-1", (1, 8, 8), False).state_dict()
  norm_first = _build("wrn-10-1", (1, 8, 8), True).state_dict()
  assert act_first.keys() == norm_first.keys()


@pytest.mark.parametrize(("name", "input_shape"), [
    ("wrn-16-4", (3, 32, 32)),
    ("resnet18", (3, 32, 32)),
    ("dp-cnn", (1, 28, 28)),
    ("dp-cnn-gn", (1, 28, 28)),
])
def test_vmapped_per_sample_gradients_match_autograd(name, input_shape):
  """The trial engine's torch.func gradients equal one-at-a-time autograd.

  In float64: the two sum a 16-layer network's terms in other orders, and in
  float32 their relative gap depends on the CPU's kernels (0.24% was seen);
  in float64 it is rounding, about 1e-14, so 1e-8 holds on any CPU."""
  model = _build(name, input_shape).double()
  num_samples, multiplicity = 2, 2
  torch.manual_seed(1)
  # A sample is a stack of augmented copies, as with augmentation multiplicity.
  images = torch.randn(num_samples, multiplicity, *input_shape,
                       dtype=torch.float64)
  labels = torch.randint(_NUM_CLASSES, (num_samples, multiplicity))
  params = {k: v.detach() for k, v in model.named_parameters()}

  def sample_loss(params, sample_images, sample_labels):
    logits = torch.func.functional_call(model, params, (sample_images,))
    return nn.functional.cross_entropy(logits, sample_labels)

  vmapped = torch.func.vmap(
      torch.func.grad(sample_loss), in_dims=(None, 0, 0))(
          params, images, labels)

  for i in range(num_samples):
    model.zero_grad()
    nn.functional.cross_entropy(model(images[i]), labels[i]).backward()
    for k, p in model.named_parameters():
      torch.testing.assert_close(vmapped[k][i], p.grad, rtol=1e-8,
                                 atol=1e-12)
  model.zero_grad()


@pytest.mark.parametrize(("name", "allowed"), [
    ("wrn-15-4", "6n+4"),
    ("wrn-4-4", "6n+4"),
    ("wrn-16-0", "width"),
    ("wrn-16", "timm model name"),
    ("no-such-model", "timm model name"),
])
def test_bad_names_raise_config_error(name, allowed):
  with pytest.raises(ConfigError) as info:
    models.ModelConfig(name)
  assert info.value.field == "model.name"
  assert info.value.value == name
  assert allowed in info.value.allowed


def test_unknown_name_lists_valid_forms():
  with pytest.raises(ConfigError) as info:
    models.ModelConfig("resnet-18")
  for form in ("wrn-<depth>-<width>", "wrn-16-4", "small-cnn", "resnet18"):
    assert form in info.value.allowed


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"num_groups": 0}, "model.num_groups"),
    ({"num_groups": 2.0}, "model.num_groups"),
    ({"norm_before_activation": "yes"}, "model.norm_before_activation"),
])
def test_bad_fields_raise_config_error(kwargs, field):
  with pytest.raises(ConfigError) as info:
    models.ModelConfig("small-cnn", **kwargs)
  assert info.value.field == field


@pytest.mark.parametrize(("input_shape", "num_classes", "field"), [
    ((8, 8), 10, "model.name"),  # Built-in models take images.
    ((), 10, "input_shape"),
    ((1, 0, 8), 10, "input_shape"),
    ((1, 8, 8), 1, "num_classes"),
])
def test_bad_build_arguments_raise_config_error(input_shape, num_classes,
                                                field):
  with pytest.raises(ConfigError) as info:
    models.build_model(models.ModelConfig("small-cnn"), input_shape,
                       num_classes)
  assert info.value.field == field


def test_timm_model_too_big_for_the_image_raises_config_error():
  # A 16x16 patch embedding cannot read 8x8 images.
  with pytest.raises(ConfigError) as info:
    models.build_model(models.ModelConfig("vit_tiny_patch16_224"), (3, 8, 8),
                       _NUM_CLASSES)
  assert info.value.field == "model.name"
  assert "per-sample gradients" in info.value.allowed
