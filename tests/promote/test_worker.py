"""tan_tune.promote.worker: a data-parallel step on Ray Train equals the
single-worker step (real local Ray, TorchTrainer with gloo workers)."""

import pathlib
from unittest import mock

import pytest
import ray.train
from ray.train.torch import TorchTrainer
import torch

from tan_tune import config_io
from tan_tune.promote import worker as promote_worker
from tan_tune.training import datasets
from tan_tune.training import models
from tan_tune.training import trial
from tan_tune.training import trial_config

pytestmark = [pytest.mark.e2e]

SAMPLINGS = {
    "poisson": {},
    # Cap 133: most steps are truncated, the others padded with zero weights.
    "truncated-poisson": {"sampling": "truncated-poisson",
                          "truncation_stds": 0.5},
    # Repeated examples.
    "fixed-with-replacement": {"sampling": "fixed-with-replacement"},
}


def _digits_config(steps=2, **sampling):
  # A simulation: its sampling and noise come from the public seed, so a
  # single worker can replay what two workers did.
  return trial_config.TrialConfig(
      dataset=datasets.DatasetConfig("digits"),
      model=models.ModelConfig("small-cnn"),
      privacy=trial_config.PrivacyConfig(batch_size=128, noise_multiplier=1.0,
                                  steps=steps, reference_batch_size=512,
                                  **sampling),
      optim=trial_config.OptimConfig(lr=1.0, momentum=0.5, ema_decay=0.9),
      max_physical_batch=32,
      eval_every=steps,
      device="cpu",
  )


@pytest.fixture(scope="module")
def two_worker_runs(tmp_path_factory, local_ray):
  """Each sampling's run by `train_worker` on the same two Ray Train workers
  (started once, not once per sampling): {sampling: (rank 0's result, its
  last checkpoint)}."""

  def every_sampling(trials):  # Nested: Ray pickles it by value.
    results = {}
    for name, config in trials.items():
      # get_checkpoint is the last one reported, here another sampling's:
      # each run starts fresh, as in a trainer of its own.
      with mock.patch.object(ray.train, "get_checkpoint", return_value=None):
        outcome = promote_worker.train_worker({"trial": config, "key": "two"})
      if outcome:  # Rank 0, with the checkpoint it reported last.
        results[name] = outcome, ray.train.get_checkpoint()
    return results

  trainer = TorchTrainer(
      every_sampling,
      train_loop_config={name: config_io.to_dict(_digits_config(**sampling))
                         for name, sampling in SAMPLINGS.items()},
      scaling_config=ray.train.ScalingConfig(num_workers=2),
      run_config=ray.train.RunConfig(
          name="two", storage_path=str(tmp_path_factory.mktemp("two"))),
  )
  return trainer.fit().return_value


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_a_two_worker_step_equals_a_one_worker_step(tmp_path, two_worker_runs,
                                                    sampling):
  """Same batches, same noise: only the order of float sums differs.

  Without dropout, nothing random depends on the rank (augmentation is
  keyed by example, so it would not either).
  """
  config = _digits_config(**SAMPLINGS[sampling])
  single = trial.run_trial(config, checkpoint_dir=tmp_path / "single")
  two, checkpoint = two_worker_runs[sampling]
  assert two["metrics"]["step"] == 2
  with checkpoint.as_directory() as folder:
    state = torch.load(pathlib.Path(folder) / trial.CHECKPOINT_FILE,
                       weights_only=False)
  expected = torch.load(tmp_path / "single" / trial.CHECKPOINT_FILE,
                        weights_only=False)
  for name, value in expected["model"].items():
    torch.testing.assert_close(state["model"][name], value, rtol=1e-5,
                               atol=1e-6)
  assert two["metrics"]["accuracy"] == pytest.approx(
      single.metrics["accuracy"], abs=2 / 360)
