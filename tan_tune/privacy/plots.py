"""Figures people would rather look at than read, written as PNG files.

matplotlib's object API renders without a display or a global backend.
"""

import math
import pathlib

from matplotlib import figure as figure_lib
import numpy as np

from tan_tune.privacy import accounting
from tan_tune.privacy import triplet as triplet_lib


def privacy_wall(
    out: pathlib.Path,
    dataset_size: int,
    eta: float,
    steps_grid: tuple[int, ...],
    delta: float,
    sigma_range: tuple[float, float] = (0.2, 10.0),
    accountant: str = "rdp",
    points: int = 40,
) -> None:
  """eps against sigma at constant eta, one curve per S (paper figure 2).

  At fixed eta and S, q = sqrt(2) eta sigma / sqrt(S) and B = q N. The curves
  sit on eps_TAN(eta) for sigma >= 2 and surge below it: the privacy wall.
  Points with B < 1 or B > N are left out.
  """
  eps_tan = eta**2 + 2 * eta * math.sqrt(math.log(1 / delta))
  sigmas = np.geomspace(*sigma_range, points)
  figure = figure_lib.Figure(figsize=(7, 4.5))
  axes = figure.subplots()
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
      ys.append(accounting.epsilon(point, delta, accountant).epsilon)
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
  axes.set_title(
      f"Privacy wall at constant eta = {eta:.4g} (N = {dataset_size:,})"
  )
  axes.legend(fontsize="small")
  axes.grid(True, which="both", alpha=0.3)
  figure.tight_layout()
  out.parent.mkdir(parents=True, exist_ok=True)
  figure.savefig(out, dpi=120)
