"""The search and promote commands as users run them: a JL search and its
promotion through the CLI, quiet by default. (--verbose, and a team's own
model named by reference: `test_examples.py`, whose examples run both.)

Real processes (`python -m tan_tune.cli`), each with its embedded local Ray.
"""

import json
import os
import pathlib
import re
import subprocess
import sys

from mlflow import MlflowClient
import pytest
import yaml

from tan_tune.search import search_files
import mlflow_stores
import promoted_runs

pytestmark = [pytest.mark.e2e]

DEMO = pathlib.Path(__file__).resolve().parents[2] / "search_spaces" / "digits-demo.yaml"


def _cli(*argv, timeout=600):
  result = subprocess.run(
      [sys.executable, "-m", "tan_tune.cli", *map(str, argv)],
      capture_output=True, text=True, timeout=timeout, check=False,
      env=dict(os.environ, RAY_AUTH_MODE="disabled"))
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  return result


# Lines of Ray's that must not reach a user's terminal by default.
_RAY_CHATTER = re.compile(r"WARNING|PlacementGroupCleaner|Trial status|"
                          r"Started a local Ray|TrainController|RayTrainWorker|"
                          r"core_worker|\u256d")


def test_a_quiet_jl_search_and_promotion_through_the_cli(tmp_path):
  """JL clipping end to end, as a user runs it: r searched by Optuna, the
  trials and the promoted run at the winner's r, every eps from pld-jl; the
  terminal shows a short live view, Ray's output goes to the log files."""
  space = yaml.safe_load(DEMO.read_text())
  # One trial at a time: both run in one Ray actor, which imports torch once.
  space.update(name="jl", num_trials=2, max_concurrent=1, eval_every=5,
               clipping="jl")
  space["hyperparameters"]["jl_projections"] = {"kind": "choice",
                                                "values": [12, 16]}
  # Ten steps: each costs r Jacobian-vector products at B_ref = 512.
  space["reference"].update(steps=10, noise_multiplier=6.0)
  path = tmp_path / "jl.yaml"
  path.write_text(yaml.safe_dump(space))
  uri = mlflow_stores.new_store(tmp_path)
  storage = tmp_path / "runs"
  searched = _cli("search", path, "--storage", storage, "--tracking-uri", uri)
  out = searched.stdout
  assert not _RAY_CHATTER.search(out + searched.stderr), out + searched.stderr
  assert len(out.splitlines()) <= 20, out
  assert "2/2 trials done (2 finished, 0 pruned, 0 failed)" in out
  assert "best ema_accuracy so far" in out
  log = storage / "jl" / "search.log"
  assert f"Ray's output goes to {log}" in out
  assert "Started a local Ray" in log.read_text()

  result = json.loads((storage / "jl" / search_files.BEST_FILE).read_text())
  r = result["params"]["jl_projections"]
  client = MlflowClient(uri)
  trial_run = client.get_run(result["mlflow_run_id"])
  assert trial_run.data.tags["tan_tune.accountant"] == "pld-jl"
  assert trial_run.data.tags["tan_tune.clipping"] == "jl"
  assert f"JL clipping with {r} projections" in (
      trial_run.data.tags["tan_tune.sampling"])

  promoted_out = _cli("promote", storage / "jl", "--new-ledger").stdout
  assert not _RAY_CHATTER.search(promoted_out), promoted_out
  assert "step 5/10: ema_accuracy" in promoted_out
  assert "step 10/10: ema_accuracy" in promoted_out
  assert "PLD-JL accountant" in promoted_out
  assert len(promoted_out.splitlines()) <= 40, promoted_out
  directory = storage / "jl" / "promote" / result["trial_id"]
  # Ray's log timed the run's steps: deleted once the run has finished.
  assert not (directory / "promote.log").exists()
  _, promoted = promoted_runs.promoted(uri, "jl")
  tags, metrics = promoted.data.tags, promoted.data.metrics
  assert (tags["tan_tune.accountant"], tags["tan_tune.clipping"]) == (
      "pld-jl", "jl")
  assert promoted.data.params["privacy.jl_projections"] == str(r)
  assert not any("rdp" in key or "prv" in key for key in metrics)
  assert 0 < metrics["final_epsilon_pld-jl"] <= 2
  for key in metrics:
    assert promoted_runs.PRIVATE_RUN_METRICS.fullmatch(key), key
