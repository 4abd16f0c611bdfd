"""Everything checkable is checked before the charge: a private `tan-tune
train` with a bad delta, bad data or a model it cannot train exits 2 with
one line naming the field, and its store is left as it was: no ledger entry,
no MLflow run."""

import pytest

from tan_tune.cli import main as cli
from tan_tune.private_runs import ledger as ledger_lib
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
  [line] = capsys.readouterr().err.strip().splitlines()
  assert database.read_bytes() == before
  assert ledger_lib.Ledger(store).entries() == []
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
