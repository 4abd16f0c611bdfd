"""Accuracy against batch size at constant eta_step (TAN figures 1 and 4).

At fixed (eta_step, S), the paper finds test accuracy roughly linear in log B:
simulated runs at B_ref / 64, B_ref / 32, B_ref / 16 lie on a line that
extrapolates to the reference run. With points (B_i, a_i),

    a = alpha + beta log2 B,

fitted by ordinary least squares, so beta is the accuracy gained per doubling
of the batch. The prediction at B_ref comes with a Student-t prediction
interval when there are at least three batch sizes (one residual degree of
freedom); two points give the line but no interval, one gives no line.
Predictions and intervals are clipped to [0, 1], where accuracies live.
"""

import dataclasses
import math
import pathlib
from typing import Sequence

from matplotlib.figure import Figure
import numpy as np
from scipy import stats


@dataclasses.dataclass(frozen=True)
class ScalingFit:
  """a = intercept + slope log2 B over the fitted points.

  Attributes:
    batch_sizes: the B_i fitted.
    accuracies: the a_i fitted.
    intercept: alpha, the accuracy the line gives at B = 1.
    slope: beta, the accuracy gained per doubling of B.
    residual_std: the residuals' standard deviation (n - 2 degrees of
      freedom); None with two points.
  """

  batch_sizes: tuple[float, ...]
  accuracies: tuple[float, ...]
  intercept: float
  slope: float
  residual_std: float | None

  def predict(self, batch_size: float) -> float:
    return _clip(self.intercept + self.slope * math.log2(batch_size))

  def interval(
      self, batch_size: float, level: float = 0.9
  ) -> tuple[float, float] | None:
    """The prediction interval of a new run at `batch_size`; None with 2 points.

    Extrapolating far beyond the fitted B widens it, as it should.
    """
    n = len(self.batch_sizes)
    if self.residual_std is None:
      return None
    x = np.log2(self.batch_sizes)
    x0 = math.log2(batch_size)
    spread = math.sqrt(
        1 + 1 / n + (x0 - x.mean()) ** 2 / ((x - x.mean()) ** 2).sum()
    )
    half = float(stats.t.ppf((1 + level) / 2, n - 2)) * self.residual_std * spread
    centre = self.intercept + self.slope * math.log2(batch_size)
    return _clip(centre - half), _clip(centre + half)

  def as_dict(self, reference_batch_size: float, level: float = 0.9) -> dict:
    interval = self.interval(reference_batch_size, level)
    return {
        "model": "accuracy = intercept + slope * log2(B)",
        "batch_sizes": list(self.batch_sizes),
        "accuracies": list(self.accuracies),
        "intercept": self.intercept,
        "slope_per_doubling": self.slope,
        "residual_std": self.residual_std,
        "reference_batch_size": reference_batch_size,
        "predicted_accuracy": self.predict(reference_batch_size),
        "interval_level": level,
        "interval": list(interval) if interval else None,
    }


def _clip(accuracy: float) -> float:
  return min(max(accuracy, 0.0), 1.0)


def fit(
    batch_sizes: Sequence[float], accuracies: Sequence[float]
) -> ScalingFit | None:
  """Least squares of accuracy on log2 B; None with fewer than 2 batch sizes.

  Several runs at one B are all kept: their spread is part of the residuals.

  Raises:
    ValueError: the lists differ in length, or a batch size is not > 0.
  """
  if len(batch_sizes) != len(accuracies):
    raise ValueError(
        f"{len(batch_sizes)} batch sizes but {len(accuracies)} accuracies"
    )
  if any(not b > 0 for b in batch_sizes):
    raise ValueError(f"batch sizes must be > 0, got {list(batch_sizes)}")
  distinct = len(set(batch_sizes))
  if distinct < 2:
    return None
  x = np.log2(np.asarray(batch_sizes, dtype=float))
  y = np.asarray(accuracies, dtype=float)
  slope, intercept = np.polyfit(x, y, 1)
  residuals = y - (intercept + slope * x)
  n = len(x)
  residual_std = (
      math.sqrt(float((residuals**2).sum()) / (n - 2)) if n > 2 else None
  )
  return ScalingFit(
      tuple(float(b) for b in batch_sizes), tuple(float(a) for a in y),
      float(intercept), float(slope), residual_std,
  )


def plot(
    scaling: ScalingFit,
    reference_batch_size: float,
    out: str | pathlib.Path,
    metric: str = "accuracy",
    actual: float | None = None,
    level: float = 0.9,
) -> pathlib.Path:
  """Draws the points, the line up to B_ref, the prediction and its interval.

  Args:
    scaling: the fit.
    reference_batch_size: B_ref, where the line is extrapolated to.
    out: the PNG to write.
    metric: the y-axis label.
    actual: the promoted run's accuracy, drawn beside the prediction.
    level: the interval's coverage.
  """
  figure = Figure(figsize=(6, 4), layout="constrained")
  axes = figure.add_subplot()
  low = min(scaling.batch_sizes)
  line_b = np.geomspace(low, reference_batch_size, 50)
  axes.plot(line_b, [scaling.predict(b) for b in line_b], "--", color="C0",
            label=f"fit: {scaling.slope:+.4f} per doubling of B")
  axes.plot(scaling.batch_sizes, scaling.accuracies, "o", color="C0",
            label="simulated runs (not private)")
  predicted = scaling.predict(reference_batch_size)
  interval = scaling.interval(reference_batch_size, level)
  error = None
  if interval:
    error = [[predicted - interval[0]], [interval[1] - predicted]]
  axes.errorbar([reference_batch_size], [predicted], yerr=error, fmt="s",
                color="C1", capsize=4,
                label=f"predicted at B_ref = {reference_batch_size:g}"
                + (f" ({level:.0%} interval)" if interval else ""))
  if actual is not None:
    axes.plot([reference_batch_size], [actual], "*", color="C2", markersize=12,
              label="promoted run (private)")
  axes.set_xscale("log", base=2)
  axes.set_xlabel("batch size B (constant eta_step, same S)")
  axes.set_ylabel(metric)
  axes.legend(fontsize="small")
  out = pathlib.Path(out)
  figure.savefig(out, dpi=120)
  return out
