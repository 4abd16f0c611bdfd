"""Tests of `api.audit` (`api/auditing.py`): the plan handed over before
the run, and the run's plumbing (its log, Ray, the outcome) with the
training replaced; the command's end-to-end audit is `test_cli_audit.py`'s,
the plan's maths `test_audit_plan.py`'s."""

import pytest

from tan_tune import api
from tan_tune import ray_cluster
from tan_tune.errors import ConfigError
from tan_tune.promote import audit_run

DEMO = "search_spaces/digits-demo.yaml"


def _options(tmp_path):
  return {"tracking_uri": f"sqlite:///{tmp_path}/mlflow.db",
          "storage": tmp_path / "runs"}


def test_a_plan_only_audit_starts_and_writes_nothing(tmp_path):
  shown = []
  audited = api.audit(DEMO, canaries=100, plan_only=True,
                      on_plan=shown.append, **_options(tmp_path))
  assert isinstance(audited, api.Audit) and audited.outcome is None
  assert isinstance(audited.plan, api.AuditPlan) and shown == [audited.plan]
  assert audited.plan.as_dict()["canaries"] == 100
  assert audited.plan.as_dict()["guesses"] == 20  # m / 5.
  assert list(tmp_path.iterdir()) == []


def test_bad_input_is_refused_before_the_plan_is_shown(tmp_path):
  shown = []
  with pytest.raises(ConfigError) as error:
    api.audit(DEMO, canaries=100, guesses=200, on_plan=shown.append,
              **_options(tmp_path))
  assert error.value.field == "--guesses"
  assert shown == [] and list(tmp_path.iterdir()) == []


def test_the_run_gets_the_options_and_its_log_is_deleted(
    tmp_path, monkeypatch, capsys):
  calls = []
  monkeypatch.setattr(ray_cluster, "resolve_and_probe",
                      lambda address: calls.append(("probe", address)))
  monkeypatch.setattr(ray_cluster, "disconnect",
                      lambda: calls.append(("disconnect",)))
  outcome = object()

  def run_audit(plan, tracking_uri, storage, **options):
    print("Ray's chatter")  # To the log, not the terminal.
    calls.append(("run", plan, tracking_uri, storage, options))
    return outcome

  monkeypatch.setattr(audit_run, "run_audit", run_audit)
  shown = []
  options = _options(tmp_path)
  audited = api.audit(DEMO, canaries=100, workers=2, address="auto",
                      target_epsilon=3.0, on_plan=shown.append, **options)
  assert audited.outcome is outcome and shown == [audited.plan]
  probe, (_, plan, uri, storage, passed), disconnect = calls
  assert probe == ("probe", "auto") and disconnect == ("disconnect",)
  assert plan is audited.plan and uri == options["tracking_uri"]
  assert storage == options["storage"]
  assert passed["workers"] == 2 and passed["address"] == "auto"
  assert passed["target_epsilon"] == 3.0 and passed["new_ledger"] is False
  assert "chatter" not in capsys.readouterr().out
  assert not (options["storage"] / api.auditing.AUDIT_LOG).exists()
