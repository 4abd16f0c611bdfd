"""The privacy calculator's figure, `tan-tune privacy plot`: eps against
sigma at constant eta, the privacy wall.

Beside `calculator.py`, whose tables need no plotting library; like it,
it imports nothing of tan_tune but `privacy/`.
"""

import os
import pathlib
from typing import Sequence

from tan_tune.api import choices
from tan_tune.api.choices import DpSampler
from tan_tune.privacy import accounting
from tan_tune.privacy import plots
from tan_tune.privacy import triplet as triplet_lib


def privacy_wall(out: str | os.PathLike, dataset_size: int, eps_tan: float,
                 steps_grid: Sequence[int], *, delta: float | None = None,
                 accountant: str | None = None,
                 samplers: Sequence[DpSampler | str] = (
                     choices.DEFAULT_SAMPLER,)
                 ) -> pathlib.Path:
  """Writes the privacy wall (TAN paper, figure 2) to the PNG file `out`:
  eps against sigma at the eta whose eps_TAN is `eps_tan`, one curve per S,
  one panel per sampler. Returns the file's path.

  Args:
    out: the PNG file to write.
    dataset_size: N, the training set's examples.
    eps_tan: the eps_TAN that fixes eta, the effective noise.
    steps_grid: the S of each curve.
    delta: defaults to 1 / N.
    accountant: one accountant for every panel; None: each sampler's own.
    samplers: a panel each, by `DpSampler` or spelling.

  Raises:
    ConfigError: an invalid delta, sampler or accountant.
  """
  delta = accounting.delta_or_default(delta, dataset_size)
  eta = triplet_lib.eta_for_eps_tan(eps_tan, delta)
  out = pathlib.Path(out)
  plots.privacy_wall(
      out, dataset_size, eta, tuple(steps_grid), delta,
      accountant=accountant,
      samplers=tuple(choices.parse_sampler(sampler) for sampler in samplers))
  return out
