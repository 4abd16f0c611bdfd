"""Random numbers keyed by item: what one example draws ignores the others.

DP-SGD's sensitivity argument needs that adding or removing one training
example changes one clipped term of the summed gradient and no other. Random
augmentation drawn from one generator in batch order breaks it: an example
added at the front shifts the draws of every example behind it, and with a
public seed the adversary knows exactly how. `KeyedRandom` instead makes row
i of every draw a function of (key, items[i], t) alone, where t counts the
values handed out so far, so an example's draws do not depend on the other
examples, the batch order, the micro-batch split, the rank or the batch size.

It is counter-based (as Philox or Threefry, Salmon et al., 2011). With h
Chris Wellons' "lowbias32", a bijection of 32-bit words with low avalanche
bias, and absorb(s, w) = h(s xor h(w)), the row key of an item (w_1 .. w_d)
under key (k_0, k_1) and value t of that row are

  r = absorb(absorb(... absorb(absorb(h(k_0), k_1), w_1) ..., w_d), d),
  word[t] = absorb(r, t),   u[t] = floor(word[t] / 2^8) 2^-24,

computed for all rows and values at once in int64 tensors holding 32-bit
words, where no product overflows. Integer arithmetic is exact on every
device, so a CPU and a GPU give the same bits. Two items share a row key with
probability 2^-32, and then draw alike: harmless, as each still draws from
its own key. The key is public in this
package (the config's seed and the step), which is enough: the sensitivity
argument needs the draws to be the example's own, not secret.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

_WORD = 0xFFFFFFFF
# lowbias32's multipliers (github.com/skeeto/hash-prospector).
_MULTIPLIERS = (0x7FEB352D, 0x846CA68B)


def hash32(x: torch.Tensor | int) -> torch.Tensor | int:
  """lowbias32 of 32-bit words held in int64 tensors (or a Python int).

  x ^= x >> 16; x *= 0x7feb352d; x ^= x >> 15; x *= 0x846ca68b; x ^= x >> 16,
  products taken mod 2^32.
  """
  x = x ^ (x >> 16)
  x = _times(x, _MULTIPLIERS[0])
  x = x ^ (x >> 15)
  x = _times(x, _MULTIPLIERS[1])
  return x ^ (x >> 16)


def _times(x: torch.Tensor | int, multiplier: int) -> torch.Tensor | int:
  """x * multiplier mod 2^32 without overflowing int64.

  A multiplier m >= 2^31 is taken as m - 2^32, the same mod 2^32, so that
  |x m| < 2^63; masking a negative product keeps its two's-complement low
  word, which is the one wanted.
  """
  if multiplier >= 2**31:
    multiplier -= 2**32
  return (x * multiplier) & _WORD


def _absorb(
    state: torch.Tensor | int, word: torch.Tensor | int
) -> torch.Tensor | int:
  """h(state xor h(word)): one more word of a row's identity."""
  return hash32(state ^ hash32(word))


class KeyedRandom:
  """Uniform draws with one row per item, row i a function of items[i] alone.

  Each call hands out the next values of every row, so the values an item
  gets depend on the key, the item and the calls made so far, never on which
  other items share the source or in which order.
  """

  def __init__(self, key: Sequence[int], items: torch.Tensor):
    """Keys one row per item.

    Args:
      key: two 32-bit words (`for_items` derives them from any entropy).
      items: [n, d] int64 words in [0, 2^32): each row one item's identity.
    """
    if items.ndim != 2:
      raise ValueError(f"items must be [n, d], got {tuple(items.shape)}")
    self.key = (int(key[0]) & _WORD, int(key[1]) & _WORD)
    self.items = items
    self._drawn = 0
    state = _absorb(hash32(self.key[0]), self.key[1])
    state = torch.full((len(items),), state, dtype=torch.int64,
                       device=items.device)
    for column in items.T:
      state = _absorb(state, column)
    # The item's length ends its identity: (a, b) and (a, b, j) never share.
    self._rows = _absorb(state, items.shape[1])

  @classmethod
  def for_items(cls, entropy: Sequence[int], ids: torch.Tensor) -> KeyedRandom:
    """One row per non-negative int64 id, keyed by the entropy's words."""
    # SeedSequence ignores trailing zeros: the length keeps (a, b) and
    # (a, b, 0) apart.
    words = [*entropy, len(entropy)]
    key = np.random.SeedSequence(words).generate_state(2)
    ids = ids.to(torch.int64)
    return cls(key, torch.stack([ids & _WORD, (ids >> 32) & _WORD], dim=1))

  def __len__(self) -> int:
    return len(self.items)

  def copies(self, k: int) -> KeyedRandom:
    """k rows per item, item-major: row i k + j is copy j of item i."""
    n = len(self.items)
    copy = torch.arange(k, device=self.items.device).repeat(n)
    items = torch.cat(
        [self.items.repeat_interleave(k, dim=0), copy[:, None]], dim=1)
    return KeyedRandom(self.key, items)

  def bits(self, *shape: int) -> torch.Tensor:
    """int64 [n, *shape] of uniform 32-bit words; the next ones of each row."""
    count = math.prod(shape)
    counter = torch.arange(self._drawn, self._drawn + count,
                           device=self.items.device)
    self._drawn += count
    words = _absorb(self._rows[:, None], counter[None, :])
    return words.view(len(self.items), *shape)

  def uniform(self, *shape: int) -> torch.Tensor:
    """float32 [n, *shape] uniform in [0, 1), on multiples of 2^-24."""
    return (self.bits(*shape) >> 8).to(torch.float32) * 2.0**-24

  def integers(self, high: int, *shape: int) -> torch.Tensor:
    """int64 [n, *shape] uniform in [0, high), for high < 2^31.

    floor(w high / 2^32) of a uniform word w (Lemire, 2019): exact integers,
    with a bias of at most high / 2^32.
    """
    if not 0 < high < 2**31:
      raise ValueError(f"high must be in [1, 2^31), got {high}")
    return (self.bits(*shape) * high) >> 32
