"""Exponential moving average (EMA) of the weights, with the TAN warm-up.

After step t the average moves towards the weights w_t with decay

    d_t = min(d, (1 + t) / (10 + t)),     ema <- d_t ema + (1 - d_t) w_t,

so early averages forget the random initialisation quickly (Tan & Le, 2019, as
used by the TAN paper, section 4.2). Only parameters are averaged: the models
tan_tune trains carry no running statistics (no BatchNorm).
"""

import torch
from torch import nn


class WeightAverage:
  """An EMA copy of a model's parameters."""

  def __init__(self, model: nn.Module, decay: float):
    if not 0.0 <= decay < 1.0:
      raise ValueError(f"decay must be in [0, 1), got {decay}")
    self.decay = decay
    self.averages = {
        name: p.detach().clone() for name, p in model.named_parameters()
    }

  def decay_at(self, step: int) -> float:
    """d_t = min(d, (1 + t) / (10 + t))."""
    return min(self.decay, (1.0 + step) / (10.0 + step))

  @torch.no_grad()
  def update(self, model: nn.Module, step: int) -> None:
    decay = self.decay_at(step)
    for name, p in model.named_parameters():
      self.averages[name].lerp_(p.detach(), 1.0 - decay)

  @torch.no_grad()
  def copy_to(self, model: nn.Module) -> None:
    """Loads the averaged weights into `model` (a copy of the trained one)."""
    for name, p in model.named_parameters():
      p.copy_(self.averages[name])

  def state_dict(self) -> dict[str, torch.Tensor]:
    return dict(self.averages)

  def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
    for name, tensor in state.items():
      self.averages[name].copy_(tensor)
