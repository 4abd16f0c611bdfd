"""What runs on Ray workers during a promotion.

`train_worker` is Ray Train's per-worker loop for the reference run: every
worker calls `trial.run_trial` with its rank, which splits each Poisson batch
and all-reduces the clipped sums (an equivalent of Opacus'
DifferentiallyPrivateDistributedDataParallel, written for AugMult and exact
resume). Ray Train's TorchTrainer has already set up `torch.distributed`
(gloo on CPU, NCCL on GPU). Rank 0 evaluates, checkpoints, and logs each
evaluation to the promoted MLflow run as it happens.

`calibration_point` trains the winner at one simulated batch size: one Ray
task of the scaling-law calibration.
"""

import dataclasses
import os
import pathlib
import shutil
from typing import Any

from mlflow import MlflowClient
import ray
import ray.train
import ray.train.torch
import torch

from tan_tune import config_io
from tan_tune import mlflow_store
from tan_tune.release import boundary
from tan_tune.release import release
from tan_tune.training import fixed_features
from tan_tune.training import trial as trial_lib
from tan_tune.training import trial_config


def train_worker(config: dict[str, Any]) -> dict[str, Any] | None:
  """One data-parallel worker of the reference run.

  Args:
    config: 'trial', the reference TrialConfig as a dict; 'key', the
      promotion's (`boundary.run_key`); optionally 'tracking_uri' and
      'run_id' of the MLflow run rank 0 logs to, as 'login'
      (`mlflow_store.login`); 'seal', a private run's
      checkpoint seal.

  Returns:
    On rank 0, the last metrics, every evaluation and the node of each rank;
    None elsewhere.
  """
  boundary.worker_setup()
  context = ray.train.get_context()
  rank, world_size = context.get_world_rank(), context.get_world_size()
  run = config_io.from_dict(trial_config.TrialConfig, config["trial"])
  if torch.cuda.is_available() and run.device != "cpu":
    # Ray Train hands each worker its GPU; "cuda" alone is always GPU 0.
    run = dataclasses.replace(
        run, device=str(ray.train.torch.get_device()))
  local = boundary.worker_folder(config["key"])
  checkpoint = ray.train.get_checkpoint()
  if checkpoint:
    checkpoint.to_directory(str(local))
  client = None
  if rank == 0 and config.get("run_id"):
    os.environ.update(config["login"])  # The driver's, to its server.
    client = MlflowClient(config["tracking_uri"])
    out = release.Release.of_run(client, config["run_id"])

  def report(metrics: dict[str, Any], directory: pathlib.Path | None) -> None:
    if client:
      # At the run's start, checked against its allow-list.
      out.log_metrics(client, config["run_id"], "promoted",
                      mlflow_store.loggable_metrics(metrics),
                      step=metrics["step"])
      out.set_tags(client, config["run_id"], "promoted",
                   mlflow_store.report_tags(metrics))
    ray.train.report(
        metrics,
        checkpoint=(ray.train.Checkpoint.from_directory(str(directory))
                    if rank == 0 else None),
    )

  try:
    result = trial_lib.run_trial(
        run, report=report, checkpoint_dir=local, rank=rank,
        world_size=world_size, seal=config.get("seal"),
        shared_features=_shared(config))
  finally:
    shutil.rmtree(local, ignore_errors=True)
  # Where each rank ran: recorded on the promoted run.
  node_ids = [ray.get_runtime_context().get_node_id()] * world_size
  if world_size > 1:
    torch.distributed.all_gather_object(node_ids, node_ids[0])
  if rank:
    return None
  outcome = {"metrics": result.metrics, "history": result.history,
             "node_ids": node_ids}
  if result.canary_scores:  # An audit: the scores, never which were in.
    outcome["canary_scores"] = {
        kind: scores.tolist() for kind, scores in result.canary_scores.items()}
  return outcome


def _shared(config: dict[str, Any]
            ) -> dict[str, fixed_features.Features] | None:
  """The features shared through Ray's object store, if any: on this node
  read in place, not copied."""
  ref = config.get("shared_features")
  return ray.get(ref) if ref is not None else None


def calibration_point(
    config: dict[str, Any],
    shared_features: dict[str, fixed_features.Features] | None = None,
) -> dict[str, Any]:
  """Trains one simulated run of the calibration; returns its last metrics.
  Ray hands `shared_features` over from its object store."""
  run = config_io.from_dict(trial_config.TrialConfig, config)
  return trial_lib.run_trial(run, shared_features=shared_features).metrics
