"""api.registry and api.champion: the registry command's functions."""

from mlflow import MlflowClient
import pytest

import promoted_records
from tan_tune import api
from tan_tune.registry import model_registry
from tan_tune.registry import privacy_card


def test_registry_and_champion_read_and_move_a_relative_sqlite_store(
    migrated_mlflow_db, tmp_path, monkeypatch):
  client = MlflowClient(migrated_mlflow_db, registry_uri=migrated_mlflow_db)
  run_id = promoted_records.log_run(client, client.create_experiment("e"))
  card = privacy_card.build(
      privacy_card.Published(client.get_run(run_id), "promoted"), None)
  model_registry.finish(client, "digits", model_registry.register(
      client, "digits", run_id, card), True)
  monkeypatch.chdir(tmp_path)
  [row] = api.registry("digits", tracking_uri="sqlite:///mlflow.db")
  assert (row.version, row.aliases) == ("1", ("candidate",))
  row = api.champion("digits", "1", 2.0, tracking_uri="sqlite:///mlflow.db")
  assert row.aliases == ("candidate", "champion")
  with pytest.raises(api.RegistryRefused, match="no MLflow store"):
    api.registry("digits", tracking_uri="sqlite:///elsewhere.db")
