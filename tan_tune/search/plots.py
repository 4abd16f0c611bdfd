"""Pictures of a finished search, for its MLflow parent run.

Optuna's optimisation history, hyper-parameter importances (fANOVA) and
parallel coordinates, drawn from the study the search kept in its directory,
and every trial's learning curve (its metric against steps). Each is a PNG
(matplotlib); the three Optuna figures are also one interactive HTML page
(plotly, its JavaScript inlined: the page works without a network), which
MLflow's artifact view shows as it is.
"""

import pathlib
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

Curve = list[tuple[int, float]]


def draw_search(study: optuna.Study, curves: dict[str, Curve], metric: str,
                folder: pathlib.Path) -> list[pathlib.Path]:
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
