"""Pictures of a finished search, for its MLflow parent run.

Optuna's optimisation history, hyper-parameter importances (fANOVA) and
parallel coordinates, drawn from the study the search kept in its directory,
every trial's learning curve (its metric against steps), and the trials'
scores against their reference runs' compute with the front. Each is a PNG
(matplotlib); the three Optuna figures are also one interactive HTML page
(plotly, its JavaScript inlined: the page works without a network), which
MLflow's artifact view shows as it is.
"""

import itertools
import pathlib
from typing import Any
import warnings

import matplotlib

matplotlib.use("Agg")  # Files only; the driver may have no display.
from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top
import optuna  # pylint: disable=g-import-not-at-top
from optuna import visualization  # pylint: disable=g-import-not-at-top

# File name -> (interactive figure, matplotlib figure) of a study.
OPTUNA_FIGURES = {
    "optimization_history": (visualization.plot_optimization_history,
                             visualization.matplotlib.plot_optimization_history),
    "param_importances": (visualization.plot_param_importances,
                          visualization.matplotlib.plot_param_importances),
    "parallel_coordinate": (visualization.plot_parallel_coordinate,
                            visualization.matplotlib.plot_parallel_coordinate),
}
HTML_FILE = "search.html"
CURVES_FILE = "learning_curves.png"
FRONT_FILE = "compute_front.png"

Curve = list[tuple[int, float]]


def draw_search(study: optuna.Study, curves: dict[str, Curve], metric: str,
                folder: pathlib.Path,
                leaderboard: list[dict[str, Any]]) -> list[pathlib.Path]:
  """Writes the search's pictures into `folder`; returns their paths.

  Without finished trials Optuna draws empty axes (and says so in the log).
  """
  folder.mkdir(parents=True, exist_ok=True)
  written, interactive = [], []
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # Optuna's matplotlib plots: experimental.
    for name, (plotly_figure, matplotlib_figure) in OPTUNA_FIGURES.items():
      axes = matplotlib_figure(study, target_name=metric)
      interactive.append(plotly_figure(study, target_name=metric))
      path = folder / f"{name}.png"
      axes.figure.savefig(path, dpi=110, bbox_inches="tight")
      plt.close(axes.figure)
      written.append(path)
  path = folder / HTML_FILE
  with path.open("w", encoding="utf-8") as page:
    page.write("<html><head><meta charset='utf-8'><title>search</title>"
               "</head><body>\n")
    for i, figure in enumerate(interactive):
      page.write(figure.to_html(full_html=False,
                                include_plotlyjs="inline" if i == 0 else False))
    page.write("</body></html>\n")
  written.append(path)
  if curves:
    written.append(_learning_curves(curves, metric, folder / CURVES_FILE))
  written.append(_compute_front(leaderboard, metric, folder / FRONT_FILE))
  return written


def _learning_curves(curves: dict[str, Curve], metric: str,
                     path: pathlib.Path) -> pathlib.Path:
  figure, axes = plt.subplots(figsize=(7, 4.5))
  for name, points in sorted(curves.items()):
    if points:
      steps, values = zip(*sorted(points))
      axes.plot(steps, values, marker="o", markersize=3, label=name)
  axes.set_xlabel("step")
  axes.set_ylabel(metric)
  axes.set_title("trials' learning curves (simulated, not private)")
  axes.grid(alpha=0.3)
  if len(curves) <= 12:
    axes.legend(fontsize=7)
  figure.savefig(path, dpi=110, bbox_inches="tight")
  plt.close(figure)
  return path


def network(params: dict[str, Any]) -> str:
  """A trial's network as the picture names it: its model and width where
  the search drew them ('scatternet', 'dp-cnn x1.5'); '' when it drew
  neither."""
  width = params.get("width")
  return " ".join(part for part in (
      params.get("model", ""), "" if width is None else f"x{width:g}") if part)


def network_points(leaderboard: list[dict[str, Any]], metric: str
                   ) -> dict[str, list[tuple[float, float, bool]]]:
  """(C, score, finished) of every scored trial, by `network`, in name
  order: a trial ASHA stopped shows its last score, at the C it stood for."""
  points = {}
  for row in leaderboard:
    if row["status"] in ("finished", "pruned") and row[metric] is not None:
      points.setdefault(network(row.get("params", {})), []).append(
          (row["reference_examples"], row[metric], row["status"] == "finished"))
  return dict(sorted(points.items()))


def _compute_front(leaderboard: list[dict[str, Any]], metric: str,
                   path: pathlib.Path) -> pathlib.Path:
  """Each trial's score against its reference run's compute, a colour per
  network, hollow where ASHA stopped it; the front (of finished trials)
  joined by a line."""
  figure, axes = plt.subplots(figsize=(7, 4.5))
  colors = itertools.cycle(plt.rcParams["axes.prop_cycle"].by_key()["color"])
  for (label, points), color in zip(
      network_points(leaderboard, metric).items(), colors):
    for finished in (True, False):
      chosen = [(c, score) for c, score, done in points if done == finished]
      if chosen:
        axes.scatter(*zip(*chosen), color=color if finished else "none",
                     edgecolors=color, label=(
                         f"{label or 'trials'}"
                         f"{'' if finished else ', stopped early'}"))
  front = sorted((row["reference_examples"], row[metric])
                 for row in leaderboard if row["front"])
  if front:
    axes.plot(*zip(*front), color="black", marker="x", label="front")
  axes.set_xlabel("reference run's compute C = B'_ref S K (example passes)")
  axes.set_ylabel(f"{metric} (simulated trial)")
  axes.set_title("score against the compute of the run each trial stands for")
  axes.grid(alpha=0.3)
  if axes.get_legend_handles_labels()[0]:  # Not for a search with no score.
    axes.legend(fontsize=8)
  figure.savefig(path, dpi=110, bbox_inches="tight")
  plt.close(figure)
  return path
