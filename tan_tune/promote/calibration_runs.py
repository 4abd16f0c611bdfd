"""Training the calibration runs a promotion plan lists (`calibration.py`
chooses them): Ray tasks, each a nested MLflow run, not private.

Each is measured as the promoted run will be: trained on the whole training
set and scored on the test split (search trials hold out a validation split
and score on it, which would bias the fit low). They select nothing, so
scoring them on test leaves selection on validation. Replicates at one batch
size differ in their public seed only (sampling, noise, augmentation).
"""

import json
import pathlib

from mlflow import MlflowClient
import ray

from tan_tune import config_io
from tan_tune import console as console_lib
from tan_tune import mlflow_store
from tan_tune.promote import worker as promote_worker
from tan_tune.promote.plan import PromotionPlan
from tan_tune.release import release
from tan_tune.search import trial_record
from tan_tune.search import trials

CALIBRATION_FILE = "calibration.json"


def train(
    plan: PromotionPlan, client: MlflowClient, run_id: str,
    directory: pathlib.Path, shared_features: ray.ObjectRef | None = None,
) -> list[tuple[int, float]]:
  """Trains the plan's calibration runs not yet done (Ray tasks, each a
  nested MLflow run, not private, reading `shared_features` from Ray's
  object store); returns all their points."""
  path = directory / CALIBRATION_FILE
  done = json.loads(path.read_text()) if path.exists() else []
  key = trials.SIMULATION_BATCH_SIZE
  finished = {(entry["params"][key], entry.get("seed", 0)) for entry in done}
  todo = [(params, seed) for seed in range(plan.calibration_seeds)
          for params in plan.calibration
          if (params[key], seed) not in finished]
  space = plan.outcome.space
  metric = space.metric
  task = ray.remote(promote_worker.calibration_point).options(
      num_cpus=space.resources.cpu, num_gpus=plan.trial_gpus)
  records = [trial_record.build(plan.outcome.resolved, params,
                                calibration_seed=seed)
             for params, seed in todo]
  futures = [task.remote(config_io.to_dict(record.config), shared_features)
             for record in records]
  for (params, seed), record, future in zip(todo, records, futures):
    metrics = ray.get(future)
    batch = record.simulated.batch_size
    child = client.create_run(
        client.get_run(run_id).info.experiment_id,
        run_name=f"calibration-B{batch}" + (f"-seed{seed}" if seed else ""),
        tags={mlflow_store.PARENT_TAG: run_id,
              mlflow_store.KIND_TAG: "calibration",
              "tan_tune.note": "a simulation: not private"})
    release.log_new_params(client, child.info.run_id,
                           {"hyperparameters": params,
                            "calibration_seed": seed,
                            **record.as_params()})
    mlflow_store.log_metrics(client, child.info.run_id, metrics,
                             step=metrics["step"])
    client.set_terminated(child.info.run_id, "FINISHED")
    done.append({"params": params, "seed": seed, "batch_size": batch,
                 metric: metrics[metric], "run_id": child.info.run_id})
    path.write_text(json.dumps(done, indent=2))
    console_lib.say(f"[tan-tune] calibration at B = {batch}"
                    + (f", seed +{seed}" if seed else "")
                    + f": {metric} = {metrics[metric]:.4f}")
  return [(entry["batch_size"], entry[metric]) for entry in done]

