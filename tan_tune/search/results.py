"""What a finished search leaves: its leaderboard, its winner, its pictures.

`trial_records` reads every trial back from Tune as a `TrialRecord`,
`leaderboard` ranks them (finished before pruned or failed, then by the
metric) with their reference runs' compute and the front of score against
it, `best_trial` is the winner as `best.json` holds it (the trial
`tan-tune promote` promotes unless told another), and `draw` makes the
search's pictures (`plots.py`) from the copy of the Optuna study kept in the
search directory (`STUDY_FILE`) and the trials' MLflow runs.
"""

import dataclasses
import math
import pathlib
from typing import Any, Sequence

import optuna
from ray import tune

from tan_tune import config_io
from tan_tune.search import compute
from tan_tune.search import plots
from tan_tune.search import progress
from tan_tune.search import trial_record

# Optuna's study, kept for the plots and for `optuna-dashboard`.
STUDY_FILE = "optuna.db"


def study_storage(directory: pathlib.Path) -> str:
  """The search's Optuna study: `optuna-dashboard <this>` opens it.

  Args:
    directory: the search directory (`SearchResult.directory`).
  """
  return f"sqlite:///{directory / STUDY_FILE}"


def draw(space, directory, leaderboard, record) -> list[pathlib.Path]:
  """The search's pictures (`plots.py`), from its study and trial runs."""
  study = optuna.load_study(study_name=space.name,
                            storage=study_storage(directory))
  curves = {
      row["trial_id"]: [(m.step, m.value) for m in record.client
                        .get_metric_history(row["mlflow_run_id"], space.metric)]
      for row in leaderboard}
  return plots.draw_search(study, curves, space.metric, directory / "plots",
                           leaderboard)


def trial_records(results, resolved) -> list[trial_record.TrialRecord]:
  """Every trial of the search as Tune left it, ended or not."""
  records = []
  for trial in tune.ExperimentAnalysis(results.experiment_path).trials:
    last = trial.last_result or {}
    if trial.status == "ERROR":
      status = "failed"
    elif progress.stopped_early(last):
      status = "pruned"
    else:
      status = "finished"
    records.append(trial_record.build(
        resolved, dict(trial.config), trial_id=trial.trial_id, status=status,
        metrics=last))
  return records


def leaderboard(trials: Sequence[trial_record.TrialRecord], space,
                record) -> list[dict[str, Any]]:
  """Every trial of the search, best first; finished before pruned or failed.

  Each row has the compute C = B'_ref S K of the reference run it stands for
  (`compute.py`), its seconds at the trial's measured throughput, and whether
  it is on the front of score against C.
  """
  rows = []
  for trial in trials:
    throughput = trial.metrics.get("examples_per_second")
    rows.append({
        "trial_id": trial.trial_id,
        "status": trial.status,
        space.metric: trial.metrics.get(space.metric),
        "step": trial.metrics.get("step"),
        # Promote estimates the reference run's wall time from it.
        "examples_per_second": throughput,
        "node_id": trial.metrics.get("node_id"),
        "params": dict(trial.params),
        "reference_examples": trial.reference_examples,
        # At the trial's own throughput and resources: a rough guide; the
        # plan times the reference run itself.
        "reference_seconds": (
            trial.reference.batch_size * trial.reference.steps
            / throughput if throughput else None),
        "mlflow_run_id": record.trial_run(trial.trial_id,
                                          dict(trial.params))[0],
    })
  front = compute.pareto_front(
      [(row["reference_examples"],
        row[space.metric] if row["status"] == "finished" else None)
       for row in rows], maximise=space.mode == "max")
  for row, on_front in zip(rows, front):
    row["front"] = on_front
  sign = -1 if space.mode == "max" else 1
  rows.sort(key=lambda row: (
      row["status"] != "finished",
      math.inf if row[space.metric] is None else sign * row[space.metric],
  ))
  return rows


def best_trial(leaderboard, trials: Sequence[trial_record.TrialRecord],
               resolved, record) -> dict[str, Any] | None:
  """The winner as `best.json` holds it (promote's default trial), from its
  leaderboard row and its record among `trials`; None when none finished."""
  space = resolved.space
  finished = [row for row in leaderboard if row["status"] == "finished"]
  if not finished:
    return None
  winner = finished[0]
  [trial] = [t for t in trials if t.trial_id == winner["trial_id"]]
  return {
      "search_space": space.name,
      "metric": space.metric,
      "mode": space.mode,
      "value": winner[space.metric],
      "trial_id": winner["trial_id"],
      "params": winner["params"],
      "simulated": trial.as_params(),
      "trial_config": config_io.to_dict(trial.config),
      "reference": {
          **dataclasses.asdict(space.reference),
          "dataset_size": resolved.dataset_size,
      },
      "mlflow_run_id": winner["mlflow_run_id"],
      "mlflow_parent_run_id": record.parent_run_id,
      "tracking_uri": record.tracking_uri,
      "note": "a simulated trial: not private; promote runs the reference",
  }
