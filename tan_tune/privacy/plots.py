"""Figures people would rather look at than read, written as PNG files.

matplotlib's object API renders without a display or a global backend.
"""

import math
import pathlib

from matplotlib import figure as figure_lib
import numpy as np

from tan_tune.privacy import accounting
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.privacy.samplers import DpSampler
from tan_tune.privacy.sampling_scheme import POISSON, SamplingScheme


def privacy_wall(
    out: pathlib.Path,
    dataset_size: int,
    eta: float,
    steps_grid: tuple[int, ...],
    delta: float,
    sigma_range: tuple[float, float] = (0.2, 10.0),
    accountant: str | None = None,
    points: int = 40,
    samplers: tuple[DpSampler, ...] = (POISSON.sampler,),
) -> None:
  """eps against sigma at constant eta, one curve per S (paper figure 2).

  At fixed eta and S, q = sqrt(2) eta sigma / sqrt(S) and B = q N. Under
  Poisson sampling the curves sit on eps_TAN(eta) for sigma >= 2 and surge
  below it: the privacy wall. One panel per sampler, each with its own
  accountant unless `accountant` is given. Points with B < 1 or B > N are
  left out.
  """
  figure = figure_lib.Figure(figsize=(7 * len(samplers), 4.5))
  for axes, sampler in zip(np.atleast_1d(figure.subplots(1, len(samplers),
                                                         sharey=True)),
                           samplers):
    _wall_panel(axes, SamplingScheme(sampler), dataset_size, eta, steps_grid,
                delta, sigma_range, accountant, points)
  figure.tight_layout()
  out.parent.mkdir(parents=True, exist_ok=True)
  figure.savefig(out, dpi=120)


def _wall_panel(axes, scheme: SamplingScheme, dataset_size: int, eta: float,
                steps_grid: tuple[int, ...], delta: float,
                sigma_range: tuple[float, float], accountant: str | None,
                points: int) -> None:
  accountant = accountant or scheme.default_accountant
  eps_tan = eta**2 + 2 * eta * math.sqrt(math.log(1 / delta))
  sigmas = np.geomspace(*sigma_range, points)
  for steps in steps_grid:
    xs, ys = [], []
    for sigma in sigmas:
      q = math.sqrt(2) * eta * sigma / math.sqrt(steps)
      batch_size = round(q * dataset_size)
      if not 1 <= batch_size <= dataset_size:
        continue
      point = triplet_lib.PrivacyTriplet(
          dataset_size, batch_size, float(sigma), steps
      )
      xs.append(sigma)
      ys.append(accounting.epsilon(point, delta, accountant, scheme).epsilon)
    axes.plot(xs, ys, marker=".", label=f"S = {steps:,}")
  axes.axhline(eps_tan, color="black", linestyle="--", label="eps_TAN")
  axes.axvspan(
      sigma_range[0], 0.5, color="red", alpha=0.08, label="wall: sigma < 0.5"
  )
  axes.axvspan(0.5, 2.0, color="orange", alpha=0.08, label="transition")
  axes.set_xscale("log")
  axes.set_yscale("log")
  axes.set_xlabel("noise multiplier sigma")
  axes.set_ylabel(f"eps ({accountant.upper()}, delta = {delta:.2g})")
  axes.set_title(f"{scheme.sampler}: privacy wall at constant eta ="
                 f" {eta:.4g} (N = {dataset_size:,})", fontsize="medium")
  axes.legend(fontsize="small")
  axes.grid(True, which="both", alpha=0.3)
