"""The promoted run's model as it leaves: version, card, MLflow Model."""


from mlflow import MlflowClient
import mlflow.pyfunc
import numpy as np
import pytest
import torch

import promoted_records
from tan_tune.promote import registration
from tan_tune.registry import served_model
from tan_tune.release import release
from tan_tune.training import models


@pytest.fixture
def store(migrated_mlflow_db):
  client = MlflowClient(migrated_mlflow_db, registry_uri=migrated_mlflow_db)
  run_id = promoted_records.log_run(client, client.create_experiment("e"))
  return client, run_id


def test_a_run_is_registered_once_and_not_without_a_name(store):
  client, run_id = store
  assert registration.register(client, run_id, None) is None
  version = registration.register(client, run_id, "digits")
  assert registration.register(client, run_id, "digits") == version == "1"
  registration.finish(client, "digits", version, finished=True)
  assert client.get_model_version("digits", "1").aliases == ["candidate"]
  registration.finish(client, None, None, finished=True)  # Nothing to do.


def test_publish_logs_the_card_and_the_mlflow_model(store, tmp_path):
  client, run_id = store
  config = models.ModelConfig(name="small-cnn")
  torch.manual_seed(0)
  model = models.build_model(config, promoted_records.INPUTS.shape, 10)
  path = tmp_path / "model.pt"
  torch.save({"model": model.state_dict(), "ema": dict(
      model.named_parameters())}, path)
  served = served_model.Servable(promoted_records.INPUTS, "ema_accuracy",
                                 "ema", None)
  out = release.Release.of_run(client, run_id)
  registration.publish(client, run_id, served, config, path, out)
  artifacts = {a.path for a in client.list_artifacts(run_id)}
  assert artifacts == {"mlflow_model", "privacy_card.json", "privacy_card.md"}
  loaded = mlflow.pyfunc.load_model(client.download_artifacts(
      run_id, "mlflow_model", str(tmp_path)))
  predicted = loaded.predict(np.zeros((2, 1, 8, 8), np.float32))
  np.testing.assert_allclose(predicted.sum(1), 1, rtol=1e-5)
  assert loaded.metadata.metadata["privacy_card"]["privacy.accountant"] == (
      "rdp")
