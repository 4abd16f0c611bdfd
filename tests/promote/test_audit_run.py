"""Tests of an audit run on Ray Train (`promote/audit_run.py`): real Ray,
real MLflow, two data-parallel workers."""

import json
import pathlib

from mlflow import MlflowClient
import pytest

from tan_tune.errors import ConfigError
from tan_tune.ledger import ledger as ledger_lib
from tan_tune.promote import audit_plan
from tan_tune.promote import audit_run
from tan_tune.training import canaries
import mlflow_stores

pytestmark = pytest.mark.e2e

DEMO = pathlib.Path("search_spaces/digits-demo.yaml")


def _store(tmp_path):
  return mlflow_stores.store(tmp_path)


def test_a_public_audit_on_two_workers_logs_its_bound_and_spends_nothing(
    tmp_path, local_ray):
  plan = audit_plan.plan_audit(DEMO, canaries=300)
  outcome = audit_run.run_audit(plan, _store(tmp_path), tmp_path / "runs",
                                workers=2)
  assert set(outcome.bounds) == {"input", "gradient"}
  epsilon = plan.epsilon().epsilon
  for found in outcome.bounds.values():
    assert found.guesses == 60 and 0 <= found.correct <= 60
    # eps = 2 at delta = 1/N: at most what 60 guesses can certify, and
    # below eps for a correct engine (95%: the run has no fixed seed).
    assert found.epsilon_lower_bound <= found.ceiling
  assert outcome.metrics["private"] is True
  assert outcome.metrics["epsilon"] == pytest.approx(epsilon)

  client = MlflowClient(_store(tmp_path))
  run = client.get_run(outcome.run_id)
  assert run.data.tags["tan_tune.kind"] == "audit"
  assert run.data.tags["tan_tune.status"] == "finished"
  assert run.data.tags["tan_tune.private"] == "false"
  assert run.data.tags["tan_tune.accountant"] == "rdp"
  assert run.info.status == "FINISHED"
  metrics = run.data.metrics
  assert metrics["epsilon"] == pytest.approx(epsilon)
  for kind, found in outcome.bounds.items():
    assert metrics[f"{kind}_epsilon_lower_bound"] == pytest.approx(
        found.epsilon_lower_bound)
    assert metrics[f"{kind}_correct"] == found.correct
    assert metrics[f"{kind}_fdp_epsilon_lower_bound"] == pytest.approx(
        found.fdp_epsilon_lower_bound)
    assert metrics[f"{kind}_fdp_ceiling"] == pytest.approx(found.fdp_ceiling)
    assert metrics[f"{kind}_guesses"] == 60
  assert run.data.params["canaries"] == "300"
  assert run.data.params["base"] == "public"
  artifacts = {a.path for a in client.list_artifacts(outcome.run_id)}
  assert artifacts == {"audit.json", "plots"}
  [picture] = client.list_artifacts(outcome.run_id, "plots")
  assert picture.path == "plots/canary_scores.png"
  summary = json.loads(pathlib.Path(client.download_artifacts(
      outcome.run_id, "audit.json", str(tmp_path))).read_text())
  assert summary["bounds"]["gradient"]["correct"] == outcome.bounds[
      "gradient"].correct
  # Nothing charged, nothing left behind, the canary draw nowhere.
  assert ledger_lib.Ledger(_store(tmp_path)).entries() == []
  assert list((tmp_path / "runs").iterdir()) == []
  seed = str(plan.config.canaries.mask_seed).encode()
  for path in tmp_path.rglob("*"):
    if path.is_file():
      assert seed not in path.read_bytes(), path


def test_a_private_audit_is_charged_before_it_trains(tmp_path, local_ray):
  plan = audit_plan.plan_audit(DEMO, canaries=100, base=canaries.PRIVATE)
  with pytest.raises(ConfigError, match="--new-ledger"):
    audit_run.run_audit(plan, _store(tmp_path), tmp_path / "runs")
  assert not (tmp_path / "runs").exists()
  outcome = audit_run.run_audit(plan, _store(tmp_path), tmp_path / "runs",
                                target_epsilon=2.5, new_ledger=True)
  [entry] = ledger_lib.Ledger(_store(tmp_path)).entries()
  assert entry.promotion.startswith("audit/")
  assert entry.triplet.dataset_size == plan.dataset_size
  assert entry.epsilon == pytest.approx(plan.epsilon().epsilon)
  run = MlflowClient(_store(tmp_path)).get_run(outcome.run_id)
  assert run.data.tags["tan_tune.private"] == "true"
  # Its wall time would time the private batches: not kept.
  assert outcome.seconds is None and "seconds" not in run.data.params
  assert outcome.as_dict()["seconds"] is None
  # The budget has no room for a second one.
  with pytest.raises(ConfigError, match="already spent"):
    audit_run.run_audit(
        audit_plan.plan_audit(DEMO, canaries=100, base=canaries.PRIVATE),
        _store(tmp_path), tmp_path / "runs")
