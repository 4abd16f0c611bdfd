"""Tests of the calibration runs: measured as the promoted run, replicated
with public seeds, resumed without repeating a finished run."""

import json

from mlflow import MlflowClient

from tan_tune import mlflow_store
from tan_tune.promote import calibration_runs
from tan_tune.promote import plan as promotion
from tan_tune.promote import search_outcome
from tan_tune.search import trial_record


def _plan(searches, tmp_path, seeds):
  directory = searches.write(tmp_path, steps=10)
  return promotion.plan_promotion(
      search_outcome.load_search_directory(directory), calibrate=True,
      calibration_seeds=seeds)


def test_a_replicate_moves_the_public_seed_and_scores_on_test(
    searches, tmp_path):
  plan = _plan(searches, tmp_path, seeds=2)
  def built(seed):
    return trial_record.build(plan.outcome.resolved, plan.calibration[0],
                              calibration_seed=seed).config
  config = trial_record.build(plan.outcome.resolved,
                              plan.calibration[0]).config
  same, other = built(0), built(1)
  assert same.validation_fraction == other.validation_fraction == 0
  assert (same.seed, other.seed) == (config.seed, config.seed + 1)
  assert same.privacy == other.privacy == config.privacy


def test_replicates_train_every_batch_size_with_every_seed_once(
    searches, tmp_path, local_ray):
  del local_ray
  plan = _plan(searches, tmp_path, seeds=2)
  assert plan.calibration_vs_reference == 2 * (8 + 16 + 32) / 512
  client = MlflowClient(plan.outcome.tracking_uri)
  experiment = client.create_experiment("promote")
  run_id = client.create_run(experiment).info.run_id
  folder = tmp_path / "promotion"
  folder.mkdir()
  points = calibration_runs.train(plan, client, run_id, folder)
  assert sorted(b for b, _ in points) == [8, 8, 16, 16, 32, 32]
  done = json.loads((folder / calibration_runs.CALIBRATION_FILE).read_text())
  assert sorted((d["batch_size"], d["seed"]) for d in done) == [
      (b, s) for b in (8, 16, 32) for s in (0, 1)]
  children = client.search_runs(
      [experiment], f"tags.`{mlflow_store.PARENT_TAG}` = '{run_id}'")
  assert sorted(r.data.params["calibration_seed"] for r in children) == [
      "0", "0", "0", "1", "1", "1"]
  # Seeds differ, so the replicates are different runs.
  by_batch = {}
  for entry in done:
    by_batch.setdefault(entry["batch_size"], set()).add(entry["run_id"])
  assert all(len(ids) == 2 for ids in by_batch.values())
  # Resumed: nothing left to train, the same points.
  assert calibration_runs.train(plan, client, run_id, folder) == points
