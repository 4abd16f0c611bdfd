"""Tests of the search's pictures: Optuna's figures, the learning curves and
the front of score against compute."""

import optuna

from tan_tune.search import plots

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _study(trials: int) -> optuna.Study:
  study = optuna.create_study(direction="maximize",
                              sampler=optuna.samplers.RandomSampler(seed=0))
  study.optimize(lambda t: t.suggest_float("lr", 0.1, 8, log=True)
                 - t.suggest_float("momentum", 0, 0.9), n_trials=trials)
  return study


def _row(examples, score, front, status="finished"):
  return {"reference_examples": examples, "ema_accuracy": score,
          "front": front, "status": status}


def test_a_search_draws_every_figure_and_one_self_contained_page(tmp_path):
  curves = {"a": [(10, 0.5), (20, 0.7)], "b": [(10, 0.6), (20, 0.65)]}
  leaderboard = [_row(2e6, 0.86, True), _row(4e6, 0.84, False),
                 _row(5e6, 0.88, True), _row(1e6, None, False, "failed")]
  written = plots.draw_search(_study(6), curves, "ema_accuracy", tmp_path,
                              leaderboard)
  names = {path.name for path in written}
  assert names == {"optimization_history.png", "param_importances.png",
                   "parallel_coordinate.png", "learning_curves.png",
                   "compute_front.png", "search.html"}
  for path in written:
    if path.suffix == ".png":
      assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  page = (tmp_path / "search.html").read_text()
  # Plotly's JavaScript is inlined once: the page needs no network.
  assert "<script src=" not in page
  assert page.count("plotly.js v") == 1
  assert page.count("Plotly.newPlot") == 3


def test_a_search_without_finished_trials_still_gets_its_figures(tmp_path):
  study = optuna.create_study(direction="maximize")
  trial = study.ask()
  trial.suggest_float("lr", 0.1, 8)
  study.tell(trial, state=optuna.trial.TrialState.FAIL)
  written = plots.draw_search(study, {}, "ema_accuracy", tmp_path, [])
  assert "learning_curves.png" not in {path.name for path in written}
  assert (tmp_path / "search.html").exists()


def test_the_front_picture_tells_networks_and_stopped_trials_apart():
  def row(model, width, examples, score, status="finished"):
    params = {"model": model, **({} if width is None else {"width": width})}
    return {**_row(examples, score, False, status), "params": params}

  leaderboard = [row("scatternet", None, 2e6, 0.90),
                 row("dp-cnn", 1.5, 2e6, 0.80, "pruned"),
                 row("dp-cnn", 1.5, 3e6, 0.87),
                 row("dp-cnn", 2, 3e6, None, "failed")]
  assert plots.network_points(leaderboard, "ema_accuracy") == {
      "dp-cnn x1.5": [(2e6, 0.80, False), (3e6, 0.87, True)],
      "scatternet": [(2e6, 0.90, True)]}
  assert plots.network({"width": 2.0}) == "x2"
  assert plots.network({"lr": 1.0}) == ""
