"""Tests of the weight EMA and its warm-up."""

import pytest
import torch
from torch import nn

from tan_tune.training import ema


def test_decay_warm_up_is_min_d_and_one_plus_t_over_ten_plus_t():
  average = ema.WeightAverage(nn.Linear(2, 2), decay=0.999)
  assert average.decay_at(0) == pytest.approx(0.1)
  assert average.decay_at(10) == pytest.approx(11 / 20)
  assert average.decay_at(10**6) == 0.999


def test_update_moves_towards_the_weights():
  model = nn.Linear(1, 1, bias=False)
  with torch.no_grad():
    model.weight.fill_(0.0)
  average = ema.WeightAverage(model, decay=0.5)
  with torch.no_grad():
    model.weight.fill_(1.0)
  average.update(model, step=100)  # d_t = 0.5
  assert average.averages["weight"].item() == pytest.approx(0.5)
  average.update(model, step=100)
  assert average.averages["weight"].item() == pytest.approx(0.75)
  copy = nn.Linear(1, 1, bias=False)
  average.copy_to(copy)
  assert copy.weight.item() == pytest.approx(0.75)


def test_state_round_trip():
  model = nn.Linear(3, 2)
  average = ema.WeightAverage(model, decay=0.9)
  other = ema.WeightAverage(nn.Linear(3, 2), decay=0.9)
  other.load_state_dict(average.state_dict())
  for name, value in average.averages.items():
    assert torch.equal(other.averages[name], value)


def test_rejects_a_decay_of_one():
  with pytest.raises(ValueError):
    ema.WeightAverage(nn.Linear(1, 1), decay=1.0)
