"""One data-parallel DP-SGD run on Ray Train: a promotion or an audit.

Ray Train's TorchTrainer starts `workers` workers of `worker.train_worker`
(gloo on CPUs, NCCL on GPUs), restarts a failed one up to twice from the
last checkpoint, and keeps two checkpoints under `storage`: they hold the
run's secret generator states, so the caller deletes `storage` once the
run has finished.
"""

import dataclasses
import pathlib
from typing import Any

import ray
import ray.train
from ray.train.torch import TorchTrainer

from tan_tune import config_io
from tan_tune import mlflow_store
from tan_tune.promote import worker as promote_worker
from tan_tune.training import checkpoint_file
from tan_tune.training import trial_config


def fit(config: trial_config.TrialConfig, *, workers: int, cpus: float,
        gpus_per_worker: float, storage: pathlib.Path, key: str,
        tracking_uri: str | None = None, run_id: str | None = None,
        shared_features: ray.ObjectRef | None = None,
        seal: checkpoint_file.Seal | None = None) -> dict[str, Any]:
  """Trains `config` on `workers` data-parallel workers, or resumes it.

  Args:
    config: the run; its device is set here ('cuda' with GPUs, else 'cpu').
    workers: data-parallel workers.
    cpus: CPUs each worker reserves.
    gpus_per_worker: GPUs each worker reserves; 0 trains on CPUs.
    storage: Ray Train's folder; a run found there under the same name
      resumes from its last checkpoint.
    key: the run's boundary key (`boundary.run_key`).
    tracking_uri, run_id: the MLflow run rank 0 logs evaluations to.
    shared_features: fixed front ends' features in Ray's object store
      (`fixed_features.for_networks`), which every worker reads.
    seal: a private run's checkpoint seal (`custody.seal`): handed to the
      workers in memory, never written to the storage.

  Returns:
    Rank 0's result (`worker.train_worker`) and the last 'checkpoint'.
  """
  use_gpu = gpus_per_worker > 0
  resources = {"CPU": cpus}
  if use_gpu:
    resources["GPU"] = gpus_per_worker
  config = dataclasses.replace(config, device="cuda" if use_gpu else "cpu")
  loop_config = {"trial": config_io.to_dict(config), "key": key,
                 "shared_features": shared_features, "seal": seal}
  if run_id:
    loop_config.update(
        tracking_uri=mlflow_store.absolute_uri(tracking_uri), run_id=run_id,
        login=mlflow_store.login())
  trainer = TorchTrainer(
      promote_worker.train_worker,
      train_loop_config=loop_config,
      scaling_config=ray.train.ScalingConfig(
          num_workers=workers, use_gpu=use_gpu,
          resources_per_worker=resources),
      run_config=ray.train.RunConfig(
          name="reference",
          storage_path=str(storage),
          failure_config=ray.train.FailureConfig(max_failures=2),
          checkpoint_config=ray.train.CheckpointConfig(num_to_keep=2),
      ),
  )
  result = trainer.fit()
  return {**result.return_value, "checkpoint": result.checkpoint}
