"""The promoted run's learning curve: held-out accuracy and eps against steps.

Drawn from the run's evaluations, which hold only what it publishes anyway
(step, held-out accuracies, epsilon): the picture adds nothing to it.
"""

import pathlib
from typing import Any

import matplotlib

matplotlib.use("Agg")  # Files only; the driver may have no display.
from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top

FILE = "learning_curve.png"


def draw(history: list[dict[str, Any]], metric: str, accountant: str,
         path: pathlib.Path) -> pathlib.Path:
  """`metric` and eps against steps, side by side; returns `path`."""
  steps = [h["step"] for h in history]
  figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
  left.plot(steps, [h[metric] for h in history], marker="o", markersize=3)
  left.set_ylabel(f"{metric} (held out)")
  right.plot(steps, [h["epsilon"] for h in history], marker="o",
             markersize=3, color="tab:red")
  right.set_ylabel(f"eps spent ({accountant.upper()})")
  for axes in (left, right):
    axes.set_xlabel("step")
    axes.grid(alpha=0.3)
  figure.suptitle("the private reference run")
  figure.tight_layout()
  figure.savefig(path, dpi=110)
  plt.close(figure)
  return path
