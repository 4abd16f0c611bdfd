"""The check every fast-clipping test makes: equal to the vmap path."""

import torch
from torch import nn

from tan_tune.training import clipping
from tan_tune.training import fast_clipping


class Tokens(nn.Module):
  """[N, C, H, W] feature maps as H W tokens of C values: 3-D Linear inputs."""

  def forward(self, x):
    return x.flatten(start_dim=2).transpose(1, 2)


def assert_matches_vmap(model, images, labels, clip_norm=None, rtol=1e-7):
  """Norms, losses and clipped sums of `fast_clipping` equal the vmap path's.

  clip_norm None takes the median norm, so that some examples are clipped
  and some are not.
  """
  grads, losses = clipping.per_sample_gradients(model, images, labels)
  if clip_norm is None:
    clip_norm = float(clipping.clip_factors(grads, 1.0)[1].median())
  factors, norms = clipping.clip_factors(grads, clip_norm)
  fast = fast_clipping.clipped_sum(model, images, labels, clip_norm)
  torch.testing.assert_close(fast.norms, norms, rtol=rtol, atol=0)
  torch.testing.assert_close(fast.losses, losses, rtol=1e-10, atol=0)
  assert fast.gradients.keys() == grads.keys()
  for name, g in grads.items():
    expected = torch.einsum("b,b...->...", factors, g)
    torch.testing.assert_close(fast.gradients[name], expected, rtol=rtol,
                               atol=1e-10, msg=name)
