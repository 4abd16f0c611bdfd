"""Which runs predict the promoted run's accuracy, and which to add.

The scaling law (`scaling_law.py`) is fitted to runs that were not selected
for their score: trials with the winner's hyper-parameters at other batch
sizes, and calibration runs of the winner at B_ref / 64, / 32, / 16 (paper,
figure 4). The winner's own search score is the maximum of many noisy trials
(winner's curse): it is shown apart and never fitted.
"""

import json
import pathlib
from typing import Any, TYPE_CHECKING

from mlflow import MlflowClient
import ray

from tan_tune import config_io
from tan_tune import console as console_lib
from tan_tune.promote import worker as promote_worker
from tan_tune.search import tracking
from tan_tune.search import trials

if TYPE_CHECKING:  # plan.py calls this module: only its types are needed.
  from tan_tune.promote.plan import PromotionPlan, SearchOutcome

CALIBRATION_FILE = "calibration.json"

# Calibration trains the winner at B_ref / d for each d (paper, figure 4).
CALIBRATION_DIVISORS = (64, 32, 16)


def _same_hyperparameters(
    outcome: "SearchOutcome", winner: dict[str, Any]
) -> list[dict[str, Any]]:
  """Finished trials that differ from the winner in simulation_batch_size only.

  The winner itself included.
  """
  def others(params):
    return {k: v for k, v in params.items()
            if k != trials.SIMULATION_BATCH_SIZE}

  metric = outcome.space.metric
  return [row for row in outcome.leaderboard
          if row["status"] == "finished" and row[metric] is not None
          and others(row["params"]) == others(winner["params"])]


def scaling_points(
    outcome: "SearchOutcome", winner: dict[str, Any]
) -> list[tuple[int, float]]:
  """(B, metric) of finished trials with the winner's hyper-parameters.

  The winner's own score is left out: it was selected for being the best,
  so it overestimates its run (winner's curse). B is each one's simulated
  batch (which a constant-eta S rescales).
  """
  points = []
  for row in _same_hyperparameters(outcome, winner):
    if row["trial_id"] == winner["trial_id"]:
      continue
    _, info = trials.trial_config(
        outcome.space, row["params"], outcome.dataset_size)
    points.append((info["simulated"]["batch_size"], row[outcome.space.metric]))
  return points


def calibration_params(
    outcome: "SearchOutcome",
    winner: dict[str, Any],
    divisors: tuple[int, ...] = CALIBRATION_DIVISORS,
) -> list[dict[str, Any]]:
  """The winner's params at B_ref / d for each d, less batches already run.

  `simulation_batch_size` is in the file's B_ref units; a constant-eta S
  rescales it like the search's own batches.
  """
  key = trials.SIMULATION_BATCH_SIZE
  present = {row["params"][key]
             for row in _same_hyperparameters(outcome, winner)}
  batches = {outcome.space.reference.batch_size // d for d in divisors}
  return [dict(winner["params"], **{key: batch})
          for batch in sorted(batches - present - {0})]


def train(
    plan: "PromotionPlan", client: MlflowClient, run_id: str,
    directory: pathlib.Path,
) -> list[tuple[int, float]]:
  """Trains the plan's calibration runs not yet done (Ray tasks, each a
  nested MLflow run, not private); returns all their points."""
  path = directory / CALIBRATION_FILE
  done = json.loads(path.read_text()) if path.exists() else []
  key = trials.SIMULATION_BATCH_SIZE
  finished = {entry["params"][key] for entry in done}
  todo = [p for p in plan.calibration if p[key] not in finished]
  space = plan.outcome.space
  metric = space.metric
  task = ray.remote(promote_worker.calibration_point).options(
      num_cpus=space.resources.cpu, num_gpus=plan.trial_gpus)
  configs = [trials.trial_config(space, params,
                                           plan.outcome.dataset_size)
             for params in todo]
  futures = [task.remote(config_io.to_dict(config)) for config, _ in configs]
  for params, (_, info), future in zip(todo, configs, futures):
    metrics = ray.get(future)
    batch = info["simulated"]["batch_size"]
    child = client.create_run(
        client.get_run(run_id).info.experiment_id,
        run_name=f"calibration-B{batch}",
        tags={tracking.PARENT_TAG: run_id, tracking.KIND_TAG: "calibration",
              "tan_tune.note": "a simulation: not private"})
    tracking.log_params(client, child.info.run_id,
                        {"hyperparameters": params, **info})
    tracking.log_metrics(client, child.info.run_id, metrics,
                         step=metrics["step"])
    client.set_terminated(child.info.run_id, "FINISHED")
    done.append({"params": params, "batch_size": batch,
                 metric: metrics[metric], "run_id": child.info.run_id})
    path.write_text(json.dumps(done, indent=2))
    console_lib.say(f"[tan-tune] calibration at B = {batch}: {metric} ="
                    f" {metrics[metric]:.4f}")
  return [(entry["batch_size"], entry[metric]) for entry in done]
