"""Everything checkable is checked before the charge: a private `tan-tune
train` with a bad delta, bad data or a model it cannot train exits 2 with
one line naming the field, and its store is left as it was: no ledger entry,
no MLflow run; a private random search likewise."""

import pytest
import yaml

from tan_tune.cli import main as cli
from tan_tune.errors import ConfigError
from tan_tune.ledger import ledger as ledger_lib
from tan_tune.release import boundary
from tan_tune.search import driver
import mlflow_stores

pytestmark = pytest.mark.usefixtures("migrated_mlflow_db")

DIGITS = """\
dataset: {name: digits}
model: {name: small-cnn}
privacy: {batch_size: 64, noise_multiplier: 1.0, steps: 4%s}
eval_every: 2
device: cpu
"""


def _refused(tmp_path, capsys, text: str) -> str:
  """Runs a private `train` of the config `text` as the first run of a new
  store; checks that it exits 2 with one line, charging nothing and
  writing nothing to the store. Returns the line."""
  store = mlflow_stores.new_store(tmp_path)
  database = tmp_path / "mlflow.db"
  before = database.read_bytes()
  config = tmp_path / "run.yaml"
  config.write_text(text)
  with pytest.raises(SystemExit) as exit_info:
    cli.main(["train", str(config), "--tracking-uri", store, "--new-ledger",
              "--target-epsilon", "8"])
  assert exit_info.value.code == 2
  assert database.read_bytes() == before
  assert ledger_lib.Ledger(store).entries() == []
  [line] = capsys.readouterr().err.strip().splitlines()
  return line


@pytest.mark.parametrize("delta, allowed", [
    ("0", "0.0 is not allowed; expected a number in (0, 1)"),
    ("-1.0e-5", "-1e-05 is not allowed; expected a number in (0, 1)"),
    (".nan", "nan is not allowed; must be a finite number"),
    ("1.0e-3", "0.001 is not allowed; at most 1/N = 0.0006959"),
])
def test_a_delta_no_private_run_may_have_charges_nothing(
    tmp_path, capsys, delta, allowed):
  """0 was read as unset: charged at 1/N, then failed at the first
  evaluation."""
  line = _refused(tmp_path, capsys, DIGITS % f", delta: {delta}")
  assert f"privacy.delta: {allowed}" in line


RECORDS = """\
dataset: {factory: "plugin_factories:flawed_records", kwargs: {flaw: %s}}
model: {factory: "plugin_factories:tabular_mlp"}
privacy: {batch_size: 60, noise_multiplier: 1.0, steps: 4}
eval_every: 2
device: cpu
"""


@pytest.mark.parametrize("flaw, allowed", [
    ("nan", "'train' split has finite inputs"),
    ("inf", "'train' split has finite inputs"),
    ("half_labels", "'train' split has integer labels"),
    ("out_of_range", "'train' split has labels in [0, num_classes = 3)"),
    ("one_class", "'train' split has examples of at least 2 classes"),
    ("empty_test", "'test' split has at least one example"),
])
def test_data_a_private_run_would_fail_on_charges_nothing(
    tmp_path, capsys, flaw, allowed):
  """One NaN was charged, then stopped the run at the secret step that drew
  it; labels 0.5 and 1.5 trained as 0 and 1; one class trained."""
  line = _refused(tmp_path, capsys, RECORDS % flaw)
  assert "dataset.factory: 'plugin_factories:flawed_records'" in line
  assert allowed in line


@pytest.mark.parametrize("config, allowed", [
    (DIGITS.replace("{name: small-cnn}",
                    '{factory: "plugin_factories:with_running_stats"}') % "",
     "model.factory: 'plugin_factories:with_running_stats' is not allowed;"
     " cannot be made DP-compatible: We do not support tracking running"),
    (DIGITS.replace("{name: small-cnn}",
                    '{factory: "plugin_factories:scaled_mlp"}') % ""
     + "clipping: fast\n",
     "clipping: 'fast' is not allowed; 'vmap' or 'auto' for this model"),
    (RECORDS % "none" + "augment: {family: crop-flip}\n",
     "augment.family: 'crop-flip' is not allowed; 'none' for inputs of"
     " shape [6]"),
])
def test_a_model_or_augmentation_the_run_cannot_train_charges_nothing(
    tmp_path, capsys, config, allowed):
  """Each was charged, then refused as the run built its state."""
  assert allowed in _refused(tmp_path, capsys, config)


def _started(*args, **kwargs):
  """In place of the search's boundary, which starts Ray before the charge
  and the trials: a search that gets there was not refused."""
  raise AssertionError("the search went on to start its trials")


@pytest.mark.parametrize("changes, allowed", [
    # dp-cnn needs 16x16 images: each trial failed, after the charge.
    ({"model": {"name": "dp-cnn"}},
     "model.name: 'dp-cnn' is not allowed; images of at least 16x16"),
    ({"dataset": {"factory": "plugin_factories:flawed_records",
                  "kwargs": {"flaw": "nan"}},
      "model": {"factory": "plugin_factories:tabular_mlp"}},
     "'train' split has finite inputs"),
])
def test_a_private_search_checks_its_model_and_data_before_its_charge(
    tmp_path, monkeypatch, changes, allowed):
  """Refused before Ray starts: nothing written, nothing charged."""
  monkeypatch.setattr(boundary, "private_run", _started)
  space = tmp_path / "space.yaml"
  space.write_text(yaml.safe_dump({
      "name": "private", "dataset": {"name": "digits"},
      "model": {"name": "small-cnn"},
      "reference": {"batch_size": 512, "noise_multiplier": 3.918,
                    "steps": 20, "target_epsilon": 4},
      "simulation_batch_sizes": [512],
      "hyperparameters": {"lr": {"kind": "loguniform", "low": 0.5,
                                 "high": 4}},
      "tuning_privacy": "private_random_search",
      "trial_count": {"distribution": "geometric", "mean": 1.5},
      "sampler": "random", "select_on": "test", "eval_every": 10,
      "device": "cpu", **changes}))
  uri = mlflow_stores.store(tmp_path)
  with pytest.raises(ConfigError) as error:
    driver.run_search(space, driver.SearchOptions(
        storage=tmp_path / "runs", tracking_uri=uri, new_ledger=True,
        verbose=0))
  assert allowed in str(error.value)
  assert not (tmp_path / "runs").exists()
  assert ledger_lib.Ledger(uri).entries() == []
