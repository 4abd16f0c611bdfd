"""Tests of `api.ledger` (`api/spending.py`): each dataset's runs and
composed spend, read from a real MLflow store (sqlite), as `tan-tune
ledger` prints them (the command's own tests are in `test_promotion.py`)."""

import json

import pytest

from tan_tune import api
from tan_tune.ledger import composition as composition_lib
from tan_tune.ledger import ledger as ledger_lib
from tan_tune.privacy import accounting
from tan_tune.privacy import triplet as triplet_lib

DIGITS_N = 1437


def _entry(promotion, identity, budget=8.0, name="digits"):
  triplet = triplet_lib.PrivacyTriplet(DIGITS_N, 512, 4.0, 100)
  return ledger_lib.Entry(
      dataset_identity=identity, dataset_name=name, promotion=promotion,
      triplet=triplet, delta=1 / DIGITS_N,
      epsilon=accounting.epsilon(triplet).epsilon, budget=budget)


def test_an_empty_store_has_spent_nothing_and_is_not_created(tmp_path):
  uri = f"sqlite:///{tmp_path}/mlflow.db"
  report = api.ledger(uri)
  assert report == api.LedgerReport(uri, ())
  assert not (tmp_path / "mlflow.db").exists()


def test_each_dataset_composes_its_own_runs_by_its_ledger_id(tmp_path):
  uri = f"sqlite:///{tmp_path}/mlflow.db"
  store = ledger_lib.Ledger(uri)
  first, second = _entry("s1/a", "digits-id"), _entry("s2/b", "digits-id",
                                                      budget=6.0)
  other = _entry("s1/c", "other-id", name="others")
  for entry in (first, second, other):
    store.reserve(entry)
  report = api.ledger(uri)
  assert isinstance(report, api.LedgerReport) and report.tracking_uri == uri
  digits, others = report.datasets
  assert isinstance(digits, api.DatasetSpend)
  assert (digits.dataset_name, others.dataset_name) == ("digits", "others")
  assert digits.runs == (first, second) and others.runs == (other,)
  assert digits.ledger_id and digits.ledger_id != others.ledger_id
  # RDP composes the two runs below the sum, above either; the budget is
  # the smallest declared, the delta the smallest of the runs.
  assert first.epsilon < digits.composed.epsilon < 2 * first.epsilon
  assert digits.composed.epsilon == pytest.approx(
      composition_lib.compose([first], second).total.epsilon)
  assert digits.budget == 6.0 and digits.delta == 1 / DIGITS_N
  assert others.composed.epsilon == pytest.approx(other.epsilon)


def test_as_dict_is_what_the_json_command_prints_and_shows_no_identity(
    tmp_path, capsys):
  from tan_tune.cli import main as cli  # pylint: disable=g-import-not-at-top

  uri = f"sqlite:///{tmp_path}/mlflow.db"
  ledger_lib.Ledger(uri).reserve(_entry("s1/a", "digits-id"))
  [spend] = api.ledger(uri).datasets
  shown = spend.as_dict()
  assert list(shown) == ["ledger_id", "dataset_name", "runs",
                         "composed_epsilon", "delta", "budget", "accountant",
                         "adjacency", "sampling"]
  assert shown["accountant"] == "rdp (composed)"
  assert shown["runs"] == [spend.runs[0].as_dict()]
  assert "dataset_identity" not in json.dumps(shown)
  assert cli.main(["ledger", "--tracking-uri", uri, "--json"]) == 0
  assert json.loads(capsys.readouterr().out) == [
      json.loads(json.dumps(shown))]
