"""Tests of `api.train` (`api/one_run.py`): one run from a path, a mapping
of callables or a TrialConfig, charged as `tan-tune train` charges it (the
command's own tests are `test_cli_train.py`). The runs are a tiny MLP on
240 records, a few steps each."""

import pytest
import yaml

from tan_tune import api
from tan_tune.errors import ConfigError
from tan_tune.ledger import ledger as ledger_lib
import mlflow_stores
import plugin_factories


def _config(**privacy):
  return {
      "dataset": {"factory": plugin_factories.tabular_tensors},
      "model": {"factory": plugin_factories.tabular_mlp},
      "privacy": {"batch_size": 32, "noise_multiplier": 2.0, "steps": 4,
                  **privacy},
      "augment": {"family": "none"},
      "eval_every": 2, "device": "cpu",
  }


def test_a_private_run_of_callables_is_charged_once_however_resumed(tmp_path):
  uri = mlflow_stores.store(tmp_path)
  checkpoints = tmp_path / "ck"
  trained = api.train(_config(), checkpoint_dir=checkpoints,
                      tracking_uri=uri, new_ledger=True, target_epsilon=50,
                      progress=False)
  assert isinstance(trained, api.Training)
  # The callables ran as the references Ray's workers would import.
  assert trained.config.dataset.factory == "plugin_factories:tabular_tensors"
  assert trained.metrics["private"] and trained.metrics["step"] == 4
  assert [r["step"] for r in trained.history] == [2, 4]
  assert trained.history[-1] == trained.metrics
  [entry] = ledger_lib.Ledger(uri).entries()
  assert trained.charge == entry.promotion and entry.budget == 50
  assert entry.promotion.startswith("train/")
  # A finished run resumed only reports, under the charge that paid for it.
  again = api.train(trained.config, checkpoint_dir=checkpoints,
                    tracking_uri=uri, progress=False)
  assert again.charge == trained.charge and again.metrics == trained.metrics
  assert ledger_lib.Ledger(uri).entries() == [entry]


def test_a_run_from_a_file_that_claims_no_privacy_is_charged_nothing(
    tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)  # The default store is ./mlflow.db.
  config = {**_config(private=False),
            "dataset": {"factory": "plugin_factories:tabular_tensors"},
            "model": {"factory": "plugin_factories:tabular_mlp"}}
  path = tmp_path / "run.yaml"
  path.write_text(yaml.safe_dump(config))
  trained = api.train(path, progress=False)
  assert trained.charge is None and not trained.metrics["private"]
  assert trained.metrics["step"] == 4
  assert not (tmp_path / "mlflow.db").exists()


def test_a_diverging_run_raises_trial_diverged(tmp_path):
  config = {**_config(private=False), "optim": {"lr": 1e38, "ema_decay": None}}
  with pytest.raises(api.TrialDiverged):
    api.train(config, progress=False,
              tracking_uri=mlflow_stores.store(tmp_path))


def test_a_bad_config_or_a_lambda_factory_is_refused_before_anything_runs(
    tmp_path):
  uri = mlflow_stores.store(tmp_path)
  with pytest.raises(ConfigError) as error:
    api.train({**_config(), "model": {"factory": lambda: None}},
              tracking_uri=uri, new_ledger=True, target_epsilon=8)
  assert error.value.field == "model.factory"
  path = tmp_path / "run.yaml"
  path.write_text("dataset: {name: digits}\nmodel: {name: small-cnn}\n"
                  "privacy: {batch_sise: 64, noise_multiplier: 1.0,"
                  " steps: 4}\n")
  with pytest.raises(ConfigError, match="batch_size"):
    api.train(path, tracking_uri=uri)
  # A private run needs its dataset's ledger named in a fresh store.
  with pytest.raises(ConfigError) as error:
    api.train(_config(), tracking_uri=uri)
  assert error.value.field == "--new-ledger"
  assert ledger_lib.Ledger(uri).entries() == []
