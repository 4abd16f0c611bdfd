"""Accuracy against batch size at constant eta_step (TAN figures 1 and 4).

At fixed (eta_step, S), simulated runs at B_ref / 64, B_ref / 32, B_ref / 16
predict the reference run. Which curve carries them to B_ref is a choice
made per prediction, from the evidence. Each candidate law is linear in one
feature x(B) of the batch size, fitted by ordinary least squares to the
points (B_i, a_i):

    log-linear      a = alpha + beta log2 B      (the paper's line)
    inverse         a = alpha + beta / B         (the noise of the averaged
                    gradient is fixed at constant sigma / B; only the
                    sampling variance falls, as 1 / B)
    inverse-sqrt    a = alpha + beta / sqrt(B)   (a saturating power law,
                    a_inf - c B^-gamma with gamma = 1/2)
    largest         a = the mean accuracy at the largest B (no gain)

Each law's backtest error is its leave-one-out error: each point in turn is
predicted by the law fitted to the others, and the root mean square of those
errors is the law's backtest error (None when the others hold fewer than the
law needs). From four batch sizes on, the law with the smallest backtest
error predicts. With three or two, a two-parameter law left with two points
passes through them exactly, so leave-one-out cannot see curvature (three
points on a line in log2 B give the line an error of 0, however it bends
later); the law that predicted the project's recorded promotions best
predicts then (`DEFAULT_LAW`, from `benchmarks/prediction.py`: 1 / B, mean
error 0.98 points over 12 promotions, 1.21 for 1 / sqrt(B), 4.24 for the
line in log2 B, which overshoots because gains per doubling shrink as B
grows; 1 / B undershoots digits by about a point and is within one on
Fashion-MNIST, 1 / sqrt(B) the other way round).

The interval brackets the promoted run rather than trusting one law's
residuals (three points leave a line one degree of freedom, and the misfit
that matters lies beyond the last point, where no residual sees it). At
constant sigma / B accuracy rises with B and its gains shrink: on every
recorded promotion the run landed between "no gain beyond the largest
calibration point" (the floor) and the 1 / sqrt(B) law (the ceiling). Each
end is widened by z sd, z the normal quantile of the level:

    low  = floor   - z sqrt(s_c^2 / k + s_r^2)
    high = ceiling + z sqrt(h s_c^2 + s_r^2)

where s_r^2 = a (1 - a) / n is the binomial variance of the promoted run's
accuracy on its n held-out examples, s_c the noise of one calibration run
(its scatter about the 1 / sqrt(B) law, at least the binomial), k the runs
at the largest B and h the leverage 1/m + (x0 - mean x)^2 / S_xx of the
1 / sqrt(B) fit at B_ref. The chosen law's prediction always lies inside.
Its coverage on the recorded promotions is printed by
`benchmarks/prediction.py` and stated in docs/benchmarks.md, and the tests
simulate it. Predictions and intervals are clipped to [0, 1].
"""

import dataclasses
import math
import pathlib
from typing import Callable, Sequence

from matplotlib.figure import Figure
import numpy as np
from scipy import stats

LOG_LINEAR, INVERSE, INVERSE_SQRT, LARGEST = (
    "log-linear", "inverse", "inverse-sqrt", "largest")
# Each law's feature x(B); the largest point has none.
_FEATURES: dict[str, Callable[[np.ndarray], np.ndarray] | None] = {
    LOG_LINEAR: np.log2,
    INVERSE: lambda b: 1 / b,
    INVERSE_SQRT: lambda b: 1 / np.sqrt(b),
    LARGEST: None,
}
FORMULAS = {
    LOG_LINEAR: "accuracy = intercept + slope * log2(B)",
    INVERSE: "accuracy = intercept + slope / B",
    INVERSE_SQRT: "accuracy = intercept + slope / sqrt(B)",
    LARGEST: "accuracy = the mean at the largest B",
}
LAWS = tuple(_FEATURES)
# Below this many batch sizes leave-one-out cannot choose (module docstring).
MIN_BATCH_SIZES_TO_CHOOSE = 4
DEFAULT_LAW = INVERSE


@dataclasses.dataclass(frozen=True)
class ScalingFit:
  """One law fitted to the points: a = intercept + slope x(B).

  Attributes:
    law: one of LAWS.
    batch_sizes: the B_i fitted.
    accuracies: the a_i fitted.
    intercept: alpha ('largest': the mean at the largest B).
    slope: beta, per unit of the law's feature (0 for 'largest').
    residual_std: the residuals' standard deviation (n - 2 degrees of
      freedom); None without a residual degree of freedom.
    backtest_error: the law's leave-one-out RMS error; None when too few.
    alternatives: the other laws fitted to the same points, each with its
      backtest error (empty on those).
    chosen_by: why this law predicts: 'backtest', 'default' (too few batch
      sizes to choose) or 'asked'.
    held_out_size: n, the examples the promoted run's accuracy is measured
      on; None leaves its binomial noise out of the interval.
  """

  law: str
  batch_sizes: tuple[float, ...]
  accuracies: tuple[float, ...]
  intercept: float
  slope: float
  residual_std: float | None
  backtest_error: float | None = None
  alternatives: tuple["ScalingFit", ...] = ()
  chosen_by: str = "asked"
  held_out_size: int | None = None

  def _centre(self, batch_size: float) -> float:
    feature = _FEATURES[self.law]
    if feature is None:
      return self.intercept
    return self.intercept + self.slope * float(feature(np.float64(batch_size)))

  def predict(self, batch_size: float) -> float:
    return _clip(self._centre(batch_size))

  def interval(
      self, batch_size: float, level: float = 0.9
  ) -> tuple[float, float]:
    """The bracket of a new run at `batch_size` (module docstring)."""
    b = np.asarray(self.batch_sizes, dtype=float)
    a = np.asarray(self.accuracies, dtype=float)
    z = float(stats.norm.ppf((1 + level) / 2))
    floor = _fit_one(LARGEST, b, a).predict(batch_size)
    saturating = _fit_one(INVERSE_SQRT, b, a)
    ceiling = saturating.predict(batch_size)
    # The noise of one calibration run: its scatter about the 1 / sqrt(B)
    # law, and at least the binomial noise of its accuracy.
    calibration = (saturating.residual_std or 0.0) ** 2
    run = 0.0
    if self.held_out_size:
      calibration = max(calibration, _binomial(a.mean(), self.held_out_size))
      run = _binomial(ceiling, self.held_out_size)
    x = 1 / np.sqrt(b)
    leverage = (1 / len(b) + (1 / math.sqrt(batch_size) - x.mean()) ** 2
                / ((x - x.mean()) ** 2).sum())
    at_largest = int((b == b.max()).sum())
    ends = sorted((floor, ceiling, self.predict(batch_size)))
    low = min(floor - z * math.sqrt(calibration / at_largest + run),
              ends[0] - z * math.sqrt(run))
    high = max(ceiling + z * math.sqrt(leverage * calibration + run),
               ends[-1] + z * math.sqrt(run))
    return _clip(low), _clip(high)

  def as_dict(self, reference_batch_size: float, level: float = 0.9) -> dict:
    interval = self.interval(reference_batch_size, level)
    return {
        "law": self.law,
        "model": FORMULAS[self.law],
        "batch_sizes": list(self.batch_sizes),
        "accuracies": list(self.accuracies),
        "intercept": self.intercept,
        "slope": self.slope,
        "residual_std": self.residual_std,
        "backtest_error": self.backtest_error,
        "chosen_by": self.chosen_by,
        "reference_batch_size": reference_batch_size,
        "predicted_accuracy": self.predict(reference_batch_size),
        "interval_level": level,
        "interval": list(interval),
        "held_out_size": self.held_out_size,
        "laws": [{"law": f.law, "model": FORMULAS[f.law],
                  "predicted_accuracy": f.predict(reference_batch_size),
                  "backtest_error": f.backtest_error,
                  "chosen": f.law == self.law}
                 for f in self.candidates()],
    }

  def candidates(self) -> list["ScalingFit"]:
    """Every law fitted, in LAWS' order, this one included."""
    return sorted((self, *self.alternatives), key=lambda f: LAWS.index(f.law))


def _binomial(accuracy: float, n: int) -> float:
  """The variance of an accuracy measured on n examples."""
  accuracy = _clip(accuracy)
  return accuracy * (1 - accuracy) / n


def _clip(accuracy: float) -> float:
  return min(max(accuracy, 0.0), 1.0)


def fit(
    batch_sizes: Sequence[float], accuracies: Sequence[float],
    law: str | None = None, held_out_size: int | None = None,
) -> ScalingFit | None:
  """`law`, or the law the evidence picks, fitted to the points; None with
  fewer than 2 batch sizes.

  From MIN_BATCH_SIZES_TO_CHOOSE batch sizes on, the evidence is the
  backtest error on these points (ties go to the law listed first in LAWS);
  with fewer, the DEFAULT_LAW. Several runs at one B are all kept: their
  spread is part of the residuals. `held_out_size` is n of the interval.

  Raises:
    ValueError: the lists differ in length, a batch size is not > 0, or the
      law is unknown.
  """
  if len(batch_sizes) != len(accuracies):
    raise ValueError(
        f"{len(batch_sizes)} batch sizes but {len(accuracies)} accuracies"
    )
  if any(not b > 0 for b in batch_sizes):
    raise ValueError(f"batch sizes must be > 0, got {list(batch_sizes)}")
  if law is not None and law not in LAWS:
    raise ValueError(f"law must be one of {list(LAWS)}, got {law!r}")
  if len(set(batch_sizes)) < 2:
    return None
  b = np.asarray(batch_sizes, dtype=float)
  a = np.asarray(accuracies, dtype=float)
  fits = [dataclasses.replace(_fit_one(name, b, a),
                              backtest_error=_backtest(name, b, a),
                              held_out_size=held_out_size)
          for name in LAWS]
  if law is not None:
    chosen, chosen_by = fits[LAWS.index(law)], "asked"
  elif len(set(batch_sizes)) >= MIN_BATCH_SIZES_TO_CHOOSE:
    chosen = min(fits, key=lambda f: f.backtest_error)
    chosen_by = "backtest"
  else:
    chosen, chosen_by = fits[LAWS.index(DEFAULT_LAW)], "default"
  return dataclasses.replace(
      chosen, chosen_by=chosen_by,
      alternatives=tuple(f for f in fits if f is not chosen))


def _fit_one(law: str, b: np.ndarray, a: np.ndarray) -> ScalingFit:
  """Least squares of a on the law's feature (or the largest B's mean)."""
  feature = _FEATURES[law]
  if feature is None:
    return ScalingFit(law, tuple(map(float, b)), tuple(map(float, a)),
                      float(a[b == b.max()].mean()), 0.0, None)
  x = feature(b)
  slope, intercept = np.polyfit(x, a, 1)
  residuals = a - (intercept + slope * x)
  n = len(x)
  residual_std = (
      math.sqrt(float((residuals**2).sum()) / (n - 2)) if n > 2 else None)
  return ScalingFit(law, tuple(map(float, b)), tuple(map(float, a)),
                    float(intercept), float(slope), residual_std)


def _backtest(law: str, b: np.ndarray, a: np.ndarray) -> float | None:
  """Leave-one-out RMS error of `law`: each point predicted by the law
  fitted to the others; None when the others leave too few batch sizes."""
  needed = 1 if _FEATURES[law] is None else 2
  errors = []
  for i in range(len(b)):
    rest = np.arange(len(b)) != i
    if len(set(b[rest])) < needed:
      return None
    errors.append(_fit_one(law, b[rest], a[rest]).predict(b[i]) - a[i])
  return float(np.sqrt(np.mean(np.square(errors))))


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
  for other in scaling.alternatives:
    axes.plot(line_b, [other.predict(b) for b in line_b], ":", linewidth=1,
              color="grey", alpha=0.7)
  axes.plot(line_b, [scaling.predict(b) for b in line_b], "--", color="C0",
            label=f"chosen law: {scaling.law}" + (
                f" (backtest error {scaling.backtest_error:.4f})"
                if scaling.backtest_error is not None else ""))
  if scaling.alternatives:
    axes.plot([], [], ":", color="grey",
              label="other laws: " + ", ".join(
                  f.law for f in scaling.alternatives))
  axes.plot(scaling.batch_sizes, scaling.accuracies, "o", color="C0",
            label="simulated runs (not private)")
  predicted = scaling.predict(reference_batch_size)
  low, high = scaling.interval(reference_batch_size, level)
  axes.errorbar([reference_batch_size], [predicted],
                yerr=[[predicted - low], [high - predicted]], fmt="s",
                color="C1", capsize=4,
                label=f"predicted at B_ref = {reference_batch_size:g}"
                f" ({level:.0%} interval)")
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
