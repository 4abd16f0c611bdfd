"""Tests for tan_tune.training.layer_clipping: each layer type against vmap."""

import pytest
from timm.layers import linear as timm_linear
from timm.layers import norm as timm_norm
from timm.layers import norm_act
import torch
from torch import nn

from tan_tune.training import fast_clipping
from tan_tune.training import layer_clipping
from clipping_reference import Tokens
from clipping_reference import assert_matches_vmap

_CLASSES = 5


def test_the_flop_rule_is_clear_cut_or_leaves_it_to_measurement():
  linear = nn.Linear(256, 256)  # p d / (p + d) = 128 rows break even.
  assert layer_clipping.use_ghost(linear, rows=4) is True
  assert layer_clipping.use_ghost(linear, rows=128 * 8 + 1) is False
  assert layer_clipping.use_ghost(linear, rows=128) is None
  conv = nn.Conv2d(64, 64, 3)  # p = 576, d = 64: break even at 57.6 rows.
  assert layer_clipping.use_ghost(conv, rows=4) is True
  assert layer_clipping.use_ghost(conv, rows=4 * 32 * 32) is False
  assert layer_clipping.use_ghost(nn.GroupNorm(2, 4), rows=1) is False


def test_a_close_call_is_measured_once_per_layer_shape(monkeypatch):
  monkeypatch.setattr(layer_clipping, "_MEASURED", {})
  torch.manual_seed(0)
  model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
                        nn.Flatten(), nn.Linear(16 * 4 * 4, _CLASSES)).double()
  images = torch.randn(4, 2, 3, 4, 4, dtype=torch.float64)
  labels = torch.randint(_CLASSES, (4,))
  # FLOPs within 8x for both: the conv (2 * 16 rows, p = 27, d = 16) and the
  # linear layer (2 rows, p = 256, d = 5).
  assert layer_clipping.use_ghost(model[0], rows=32) is None
  assert layer_clipping.use_ghost(model[3], rows=2) is None
  assert_matches_vmap(model, images, labels)
  assert len(layer_clipping._MEASURED) == 2
  assert all(isinstance(c, bool) for c in layer_clipping._MEASURED.values())
  assert_matches_vmap(model, images, labels)
  assert len(layer_clipping._MEASURED) == 2
  # A batch of another size (Poisson) is not measured again.
  assert_matches_vmap(model, images[:3], labels[:3])
  assert len(layer_clipping._MEASURED) == 2


@pytest.mark.parametrize("small", [True, False])
def test_instantiated_gradients_are_kept_only_when_smaller(monkeypatch, small):
  """Book-keeping (a weighting of kept per-example gradients) and the scaled
  weight gradient give the same sums."""
  monkeypatch.setattr(layer_clipping, "use_ghost", lambda module, rows: False)
  kept = []
  original = layer_clipping.LayerClip._keep
  monkeypatch.setattr(layer_clipping.LayerClip, "_keep",
                      lambda self, g: (kept.append(self.name), original(self, g)))
  torch.manual_seed(1)
  # 4 -> 4 channels on 8x8 maps: the per-example gradient (148 values) is
  # smaller than the conv's input and output gradient (512); on 2x2 maps
  # (32) it is not.
  size = 8 if small else 2
  model = nn.Sequential(nn.Conv2d(3, 4, 1), nn.Conv2d(4, 4, 3, padding=1),
                        nn.Flatten(), nn.Linear(4 * size * size,
                                                _CLASSES)).double()
  images = torch.randn(3, 2, 3, size, size, dtype=torch.float64)
  assert_matches_vmap(model, images, torch.randint(_CLASSES, (3,)))
  assert ("1" in kept) == small


def test_timm_norm_and_linear_layers():
  """Including GroupNormAct, which `models` puts in place of BatchNorm."""
  torch.manual_seed(4)
  model = nn.Sequential(
      nn.Conv2d(3, 4, 3), timm_norm.GroupNorm(4, num_groups=2), timm_norm.GroupNorm1(4),
      norm_act.GroupNormAct(4, 2, act_layer=nn.SiLU), Tokens(),
      timm_norm.LayerNorm(4), nn.Flatten(),
      timm_linear.Linear(36 * 4, _CLASSES)).double()
  with torch.no_grad():
    for p in model.parameters():
      p.normal_()
  assert not fast_clipping.uncovered_parameters(model)
  images = torch.randn(3, 2, 3, 8, 8, dtype=torch.float64)
  assert_matches_vmap(model, images, torch.randint(_CLASSES, (3,)))


def test_norms_are_float32_under_bfloat16_autocast():
  torch.manual_seed(5)
  model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.GroupNorm(2, 8), nn.ReLU(),
                        nn.Flatten(), nn.Linear(8 * 6 * 6, _CLASSES))
  images = torch.randn(6, 2, 3, 8, 8)
  labels = torch.randint(_CLASSES, (6,))
  exact = fast_clipping.clipped_sum(model, images, labels, 1.0)
  with torch.autocast("cpu", dtype=torch.bfloat16):
    mixed = fast_clipping.clipped_sum(model, images, labels, 1.0)
  assert mixed.norms.dtype == torch.float32
  # bfloat16 activations: 8 bits of mantissa, a few per cent at most.
  torch.testing.assert_close(mixed.norms, exact.norms, rtol=0.05, atol=0)
  for name, p in model.named_parameters():
    assert mixed.gradients[name].dtype == p.dtype == torch.float32
