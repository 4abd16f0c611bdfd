"""The team's CNN, as it would live in its own package.

tan_tune calls `build(**kwargs)` wherever the run trains; the model must map
[batch, 3, H, W] images to [batch, classes] logits and use GroupNorm, not
BatchNorm (DP-SGD clips each example's gradient, and BatchNorm mixes them).
"""

from torch import nn


class StripeNet(nn.Module):
  """Two convolutions with GroupNorm, global pooling and a linear head."""

  def __init__(self, width: int, classes: int):
    super().__init__()
    self.features = nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1), nn.GroupNorm(4, width), nn.ReLU(),
        nn.Conv2d(width, width, 3, padding=1, stride=2),
        nn.GroupNorm(4, width), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten())
    self.head = nn.Linear(width, classes)

  def forward(self, images):
    return self.head(self.features(images))


def build(width: int = 16, classes: int = 2) -> nn.Module:
  return StripeNet(width, classes)
