"""Tests of the DP literature's CNN and its width multiplier."""

import pytest
import torch
from torch import nn

from tan_tune.errors import ConfigError
from tan_tune.training import dp_cnn
from tan_tune.training import models


def _parameters(model):
  return sum(p.numel() for p in model.parameters())


def test_width_one_is_the_literatures_26k_parameter_network():
  """Papernot et al. 2021 / Tramer & Boneh 2021 on 28x28 images."""
  model = dp_cnn.dp_cnn((1, 28, 28), 10, 16, group_norm=False)
  assert _parameters(model) == 26_010
  shapes = [tuple(m.weight.shape) for m in model.modules()
            if isinstance(m, (nn.Conv2d, nn.Linear))]
  assert shapes == [(16, 1, 8, 8), (32, 16, 4, 4), (32, 512), (10, 32)]
  assert sum(isinstance(m, nn.Tanh) for m in model.modules()) == 3
  grouped = dp_cnn.dp_cnn((1, 28, 28), 10, 16, group_norm=True)
  assert sum(isinstance(m, nn.GroupNorm) for m in grouped.modules()) == 2
  assert model(torch.zeros(3, 1, 28, 28)).shape == (3, 10)


def test_width_multiplies_channels_and_hidden_units():
  assert dp_cnn.channels(1.0) == (16, 32, 32)
  assert dp_cnn.channels(1.5) == (24, 48, 48)
  wide = dp_cnn.dp_cnn((1, 28, 28), 10, 16, group_norm=True, width=2.0)
  assert wide.features[0].out_channels == 32 and wide.fc1.out_features == 64
  assert wide(torch.zeros(2, 1, 28, 28)).shape == (2, 10)


def test_a_width_through_the_model_config():
  config = models.ModelConfig("dp-cnn-gn", width=1.5)
  model = models.build_model(config, (1, 28, 28), 10)
  assert model.fc1.out_features == 48
  small = models.build_model(models.ModelConfig("small-cnn", width=0.5),
                             (1, 8, 8), 10)
  assert small.conv1.out_channels == 16


@pytest.mark.parametrize("fields", [
    {"name": "wrn-16-4", "width": 2.0},
    {"name": "dp-cnn", "width": 0},
    {"name": "dp-cnn", "width": "wide"},
])
def test_a_width_the_model_cannot_take_is_refused(fields):
  with pytest.raises(ConfigError) as error:
    models.ModelConfig(**fields)
  assert error.value.field == "model.width"


def test_images_too_small_for_the_second_convolution_are_refused():
  with pytest.raises(ConfigError) as error:
    dp_cnn.dp_cnn((1, 8, 8), 10, 16, group_norm=False)
  assert "at least 16x16" in error.value.allowed
