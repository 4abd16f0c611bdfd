"""Registered versions of private models: card, aliases, champion, audits."""

from mlflow import MlflowClient
import pytest

import promoted_records
from tan_tune.registry import model_registry
from tan_tune.registry import privacy_card
from tan_tune.release import release


@pytest.fixture
def store(migrated_mlflow_db):
  client = MlflowClient(migrated_mlflow_db, registry_uri=migrated_mlflow_db)
  return client, client.create_experiment("e")


def _registered(client, experiment, sigma=3.9182, finished=True):
  run_id = promoted_records.log_run(client, experiment, sigma=sigma)
  card = privacy_card.build(
      privacy_card.Published(client.get_run(run_id), "promoted"), None)
  version = model_registry.register(client, "digits", run_id, card)
  model_registry.finish(client, "digits", version, finished)
  return run_id, version


def test_a_version_carries_its_card_and_becomes_the_candidate(store):
  client, experiment = store
  run_id, version = _registered(client, experiment)
  found = client.get_model_version("digits", version)
  assert found.description.startswith("# Privacy card: (2, 0.000696)-DP")
  assert found.source == f"runs:/{run_id}/mlflow_model"
  assert found.tags["privacy.accountant"] == "rdp"
  assert found.tags["tan_tune.status"] == "finished"
  assert found.aliases == ["candidate"]
  assert found.current_stage == "None"  # Aliases, never stages.
  assert model_registry.version_of_run(client, "digits", run_id) == version
  assert model_registry.version_of_run(client, "digits", "other") is None


def test_versions_list_eps_accuracy_and_the_audit_of_their_config(store):
  client, experiment = store
  _registered(client, experiment)
  _registered(client, experiment, sigma=2.0, finished=False)
  out = release.Release()
  audit = out.create_run(client, experiment, "audit", "audit",
                         {"tan_tune.status": "finished"})
  config = promoted_records.config()
  out.log_params(client, audit, "audit", {
      "audited_batch_size": 512, "noise_multiplier": 3.9182, "steps": 40,
      "clip_norm": 1.0, "clipping": config.clipping})
  out.log_metrics(client, audit, "audit", {
      "input_epsilon_lower_bound": 0.3, "gradient_epsilon_lower_bound": 0.5})
  second, first = model_registry.versions(client, "digits")
  assert (first.version, first.aliases, first.status) == (
      "1", ("candidate",), "finished")
  assert first.epsilon == pytest.approx(1.9997, abs=1e-4)
  assert first.delta == pytest.approx(1 / 1437, rel=1e-5)
  assert (first.accountant, first.metric, first.accuracy, first.audit) == (
      "rdp", "ema_accuracy", 0.95, 0.5)
  assert (second.status, second.aliases, second.audit) == ("failed", (), None)
  assert second.epsilon == pytest.approx(4.8117, abs=1e-4)  # sigma = 2.


def test_the_champion_moves_only_within_the_limit(store):
  client, experiment = store
  _registered(client, experiment)
  row = model_registry.move_champion(client, "digits", "1", max_epsilon=2)
  assert row.aliases == ("candidate", "champion")
  assert client.get_model_version_by_alias("digits", "champion").version == 1
  with pytest.raises(model_registry.RegistryRefused,
                     match=r"eps = 2 at delta = 0.000696 \(rdp\), over"
                     r" --max-epsilon 1.5"):
    model_registry.move_champion(client, "digits", "1", max_epsilon=1.5)


@pytest.mark.parametrize("name, version, reason", [
    ("digits", "7", "digits has no version 7; it has 1, 2, 3"),
    ("mnist", "1", "no registered model 'mnist'; the store has digits"),
    ("digits", "2", "digits version 2 has no trained model: its run is failed"),
    ("digits", "3", "digits version 3 has no privacy card: it was not"
     " registered by tan-tune promote --register"),
])
def test_each_refusal_says_why_in_one_line(store, name, version, reason):
  client, experiment = store
  _registered(client, experiment)
  _registered(client, experiment, finished=False)
  client.create_model_version("digits", "runs:/x/mlflow_model")  # No card.
  with pytest.raises(model_registry.RegistryRefused) as refused:
    model_registry.move_champion(client, name, version, max_epsilon=8)
  assert str(refused.value).startswith(reason)
  assert "\n" not in str(refused.value)


def test_names_are_those_a_models_uri_takes():
  assert model_registry.valid_name("digits-demo.v2_1")
  for bad in ("", "-x", "a b", "a/b", "a@b", "a:b"):
    assert not model_registry.valid_name(bad), bad
