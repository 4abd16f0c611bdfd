"""Canaries for auditing a real training run (Steinke, Nasr & Jagielski 2023).

An audited run trains on its base examples plus the included canaries:
canary i is in iff its secret S_i = +1, drawn uniformly from the run's
`mask_seed` (which the auditor draws from the OS's secret source and never
writes). Two kinds, each m strong, audited separately:

- input canaries (black box): images of uniform noise in [0, 1] with a
  label drawn at random. They go through the run like any example
  (augmentation, micro-batching, the clipping engine, the sampler,
  data-parallel shards); the score of canary i is -l(f_T(x_i), y_i), the
  negative loss of the final model on it.
- gradient canaries (white box): a canary whose clipped gradient is
  u_i = C e_{j_i}, one parameter coordinate j_i per canary; whenever the
  sampler draws it, u_i joins the step's clipped sum (it is already of norm
  C, so clipping leaves it). Its score is -(theta_T - theta_0)[j_i]: an SGD
  step moves the coordinate against u_i.

The canaries' inputs, labels and coordinates come from the public seed of
the run: everything but S is known to the auditor, as the paper assumes.
The base examples are the dataset's test split ('public': an audit of the
engine that spends nothing) or its training split ('private': a private
run, charged like any other).

How many canaries are in is a function of S, so the audit run never
publishes its training-set size N_a = base + included canaries (nor B_a,
delta or eps computed from it). Its N is the universe's, N_u = base + m per
kind, every canary counted whether included or not: a Poisson sampler
(`sampling.py`) draws each present row with probability B_a / N_u and never
an absent canary, which is Poisson sampling of the universe at the public
q = B_a / N_u. Canary i is still in the universe's draw iff S_i = +1, an
independent fair coin, so the audit's statistics hold as before. A
fixed-size sampler draws B of the rows present and has no such universe: a
private audit refuses it.
"""

import dataclasses
import hashlib
from typing import Callable

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from tan_tune.errors import ConfigError
from tan_tune.training import splits as splits_lib

INPUT, GRADIENT = "input", "gradient"
KINDS = (INPUT, GRADIENT)
PUBLIC, PRIVATE = "public", "private"
BASES = (PUBLIC, PRIVATE)
# Streams of the public seed: the canaries' design never shares draws with
# training's.
_INPUT_SALT, _COORDINATE_SALT = 0xCA7A, 0xC0DE


@dataclasses.dataclass(frozen=True)
class CanaryConfig:
  """The canaries of an audited run.

  Attributes:
    count: m, canaries of each kind.
    kinds: which of 'input' (black box) and 'gradient' (white box).
    base: 'public' trains on the test split and the canaries; 'private' on
      the training split and the canaries.
    mask_seed: seeds S; secret, never shown (not in the repr).
  """

  count: int
  mask_seed: int = dataclasses.field(repr=False)
  kinds: tuple[str, ...] = KINDS
  base: str = PUBLIC

  def __post_init__(self):
    if self.count < 1:
      raise ConfigError("canaries.count", self.count, "an integer m >= 1")
    if not self.kinds or set(self.kinds) - set(KINDS) or len(
        set(self.kinds)) != len(self.kinds):
      raise ConfigError("canaries.kinds", list(self.kinds),
                        f"one or both of {list(KINDS)}, once each")
    if self.base not in BASES:
      raise ConfigError("canaries.base", self.base, f"one of {list(BASES)}")

  def universe_size(self, base_size: int) -> int:
    """N_u = base + m per kind: public, whatever S draws."""
    return base_size + self.count * len(self.kinds)

  def included(self) -> dict[str, np.ndarray]:
    """S_i = +1 (True) per canary of each kind."""
    draws = np.random.default_rng(self.mask_seed).random(
        (len(KINDS), self.count)) < 0.5
    return {kind: draws[KINDS.index(kind)] for kind in self.kinds}


def input_canaries(count: int, seed: int, input_shape: tuple[int, ...],
                   num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
  """m noise images [m, C, H, W] in [0, 1] and their random labels."""
  generator = torch.Generator().manual_seed(seed + _INPUT_SALT)
  images = torch.rand((count, *input_shape), generator=generator)
  labels = torch.randint(num_classes, (count,), generator=generator)
  return images, labels


def gradient_coordinates(count: int, seed: int, model: nn.Module) -> np.ndarray:
  """m distinct coordinates j_i of the model's trainable parameters, flat."""
  size = sum(p.numel() for p in model.parameters() if p.requires_grad)
  if count > size:
    raise ConfigError("canaries.count", count,
                      f"at most the model's {size} parameters for gradient"
                      " canaries")
  return np.random.default_rng(seed + _COORDINATE_SALT).choice(
      size, count, replace=False)


@dataclasses.dataclass(frozen=True, eq=False)
class CanarySplit:
  """The base examples, then the included input canaries, then the included
  gradient canaries: one index space for the sampler.

  Attributes:
    base: the base examples.
    images: float images in [0, 1] of the included input canaries.
    labels: their labels.
    gradient_ids: which gradient canary (0..m-1) each gradient row is.
  """

  base: splits_lib.Split
  images: torch.Tensor
  labels: torch.Tensor
  gradient_ids: torch.Tensor

  @property
  def first_gradient_row(self) -> int:
    return len(self.base) + len(self.labels)

  def __len__(self) -> int:
    return self.first_gradient_row + len(self.gradient_ids)

  def get_batch(self, indices: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Images and labels of base and input-canary rows only."""
    if bool((indices >= self.first_gradient_row).any()):
      raise ValueError("gradient canaries have no image")
    in_base = indices < len(self.base)
    images, labels = self.base.get_batch(indices[in_base])
    shape = (len(indices), *images.shape[1:])
    batch = images.new_empty(shape)
    batch[in_base] = images
    batch[~in_base] = self.images[indices[~in_base] - len(self.base)]
    all_labels = labels.new_empty(len(indices))
    all_labels[in_base] = labels
    all_labels[~in_base] = self.labels[indices[~in_base] - len(self.base)]
    return batch, all_labels

  def example_digests(self) -> list[bytes]:
    """The base examples', the input canaries' (`splits.example_digest`,
    as any example's), then one per gradient canary, from its id alone:
    what augmentation keys each row's draws by."""
    inputs = [splits_lib.example_digest(image, int(label))
              for image, label in zip(self.images, self.labels)]
    gradients = [hashlib.blake2b(b"gradient canary" + int(i).to_bytes(
        8, "little"), digest_size=splits_lib.DIGEST_BYTES).digest()
                 for i in self.gradient_ids]
    return self.base.example_digests() + inputs + gradients


class Canaries:
  """One run's canaries: its training split, their gradients and scores.

  Attributes:
    universe_size: N_u, the base examples and every canary, included or not
      (`CanaryConfig.universe_size`).
  """

  def __init__(self, config: CanaryConfig, seed: int, base: splits_lib.Split,
               input_shape: tuple[int, ...], num_classes: int,
               model: nn.Module):
    self.config = config
    included = config.included()
    self.images, self.labels = input_canaries(config.count, seed, input_shape,
                                              num_classes)
    empty = torch.zeros(0, dtype=torch.int64)
    kept_inputs = (torch.from_numpy(np.flatnonzero(included[INPUT]))
                   if INPUT in included else empty)
    kept_gradients = (torch.from_numpy(np.flatnonzero(included[GRADIENT]))
                      if GRADIENT in included else empty)
    self.split = CanarySplit(base, self.images[kept_inputs],
                             self.labels[kept_inputs], kept_gradients)
    self.universe_size = config.universe_size(len(base))
    self.coordinates = (gradient_coordinates(config.count, seed, model)
                        if GRADIENT in config.kinds else None)
    # theta_0 at the coordinates: the initialisation is public, so a resumed
    # run rebuilds the same values before loading its checkpoint.
    self.initial = (None if self.coordinates is None
                    else _flat(model)[self.coordinates].clone())

  def split_rows(self, indices: torch.Tensor, weights: torch.Tensor | None
                 ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """(indices and weights of rows with inputs, weight per gradient canary
    sampled in this shard: m values, 0 for the undrawn)."""
    is_gradient = indices >= self.split.first_gradient_row
    drawn = torch.zeros(len(self.split.gradient_ids))
    rows = indices[is_gradient] - self.split.first_gradient_row
    drawn.index_add_(0, rows, torch.ones(len(rows)) if weights is None
                     else weights[is_gradient].cpu().float())
    counts = torch.zeros(self.config.count)
    counts[self.split.gradient_ids] = drawn
    kept = ~is_gradient
    return (indices[kept], None if weights is None else weights[kept], counts)

  def gradient_sum(self, model: nn.Module, counts: torch.Tensor,
                   clip_norm: float) -> dict[str, torch.Tensor]:
    """sum_i w_i u_i, u_i = C e_{j_i}, over the gradient canaries drawn:
    a tensor for each parameter that holds a drawn canary's weight only
    (this runs every step: no model-sized buffer)."""
    drawn = torch.nonzero(counts).flatten()
    if not len(drawn):
      return {}
    total, offset = {}, 0
    coordinates = torch.from_numpy(self.coordinates)[drawn]
    for name, p in model.named_parameters():
      if not p.requires_grad:
        continue
      mine = (coordinates >= offset) & (coordinates < offset + p.numel())
      if bool(mine.any()):
        g = torch.zeros(p.numel(), device=p.device, dtype=p.dtype)
        g[(coordinates[mine] - offset).to(p.device)] = (
            counts[drawn][mine] * clip_norm).to(p.device, p.dtype)
        total[name] = g.view_as(p)
      offset += p.numel()
    return total

  @torch.no_grad()
  def scores(self, model: nn.Module, normalise: Callable[[torch.Tensor],
                                                          torch.Tensor],
             chunk: int = 256) -> dict[str, np.ndarray]:
    """Y_i per kind, larger when canary i looks included; the input
    canaries go through the model `chunk` at a time."""
    result = {}
    if INPUT in self.config.kinds:
      model.eval()
      device = next(model.parameters()).device
      losses = [
          F.cross_entropy(model(normalise(images.to(device))),
                          labels.to(device), reduction="none").cpu()
          for images, labels in zip(torch.split(self.images, chunk),
                                    torch.split(self.labels, chunk))]
      result[INPUT] = -torch.cat(losses).numpy()
    if GRADIENT in self.config.kinds:
      moved = _flat(model)[self.coordinates] - self.initial
      result[GRADIENT] = (-moved).numpy()
    return result


def _flat(model: nn.Module) -> torch.Tensor:
  return torch.cat([p.detach().flatten().cpu()
                    for p in model.parameters() if p.requires_grad])
