"""Ledger entries no one can quietly edit: every charge and `tan-tune
ledger` verify each entry's seal and refuse, naming it."""

import pytest

from tan_tune.cli import main as cli
from tan_tune.errors import ConfigError
from tan_tune.ledger import charge
from tan_tune.ledger import ledger as ledger_lib
from tan_tune.ledger import ledger_entry
from tan_tune.ledger import ledger_seal
from tan_tune.privacy import accounting
from tan_tune.privacy import triplet as triplet_lib

DIGITS_N = 1437
KEY = b"k" * 32


def _entry(promotion, identity="digits-id", budget=None):
  triplet = triplet_lib.PrivacyTriplet(DIGITS_N, 512, 4.0, 100)
  epsilon = accounting.epsilon(triplet).epsilon
  return ledger_lib.Entry(
      dataset_identity=identity, dataset_name="digits", promotion=promotion,
      triplet=triplet, delta=1 / DIGITS_N, epsilon=epsilon,
      budget=budget or epsilon)  # One run spends the whole budget.


@pytest.fixture
def spent(migrated_mlflow_db, monkeypatch):
  """A store whose digits spent their whole budget on one promoted run;
  the entry's run id."""
  monkeypatch.delenv("TAN_TUNE_LEDGER_KEY_FILE", raising=False)
  ledger = ledger_lib.Ledger(migrated_mlflow_db)
  entry = _entry("search/trial/attempt")
  charge.charge(ledger, entry, new_ledger=True)
  assert ledger.link(entry.promotion, "promoted-run")
  [run] = ledger.runs_of(entry.promotion)
  return ledger, run.info.run_id


def _give_the_budget_back(client, run_id):
  """The edit a person with write access to the server makes."""
  client.set_tag(run_id, ledger_lib.WITHDRAWN_TAG, "true")
  client.delete_tag(run_id, ledger_lib.PROMOTED_RUN_TAG)


EDITS = {
    "withdrawn": _give_the_budget_back,
    "another dataset": lambda client, run_id: client.set_tag(
        run_id, ledger_lib.IDENTITY_TAG, "another-dataset"),
    "another ledger id": lambda client, run_id: client.set_tag(
        run_id, ledger_entry.LEDGER_ID_TAG, "00000000"),
    "another run": lambda client, run_id: client.set_tag(
        run_id, ledger_lib.PROMOTED_RUN_TAG, "a-run-never-released"),
    "seal removed": lambda client, run_id: client.delete_tag(
        run_id, ledger_seal.MAC_TAG),
}


@pytest.mark.parametrize("edit", EDITS.values(), ids=EDITS.keys())
def test_an_edited_entry_stops_every_charge_and_the_ledger_naming_it(
    spent, edit, capsys):
  ledger, run_id = spent
  edit(ledger.client, run_id)
  fresh = ledger_lib.Ledger(ledger.tracking_uri)
  with pytest.raises(ConfigError, match=run_id):
    fresh.entries()
  with pytest.raises(ConfigError, match="changed without the ledger key"):
    charge.charge(fresh, _entry("next/run"), new_ledger=True)
  with pytest.raises(SystemExit) as exit_info:
    cli.main(["ledger", "--tracking-uri", ledger.tracking_uri])
  assert exit_info.value.code == 2
  [line] = capsys.readouterr().err.strip().splitlines()
  assert run_id in line and "search/trial/attempt" in line


def test_without_the_seal_check_the_edit_gives_the_budget_back(
    spent, monkeypatch):
  """What the check stops: with `verify` removed, the issue's edit turns a
  spent budget into an unspent one and a second full-budget run is
  accepted. (This test, and the one above, fail when the check is gone.)"""
  ledger, run_id = spent
  _give_the_budget_back(ledger.client, run_id)
  monkeypatch.setattr(ledger_seal, "verify", lambda key, run: None)
  fresh = ledger_lib.Ledger(ledger.tracking_uri)
  assert fresh.entries() == []
  charge.charge(fresh, _entry("second/full-budget"), new_ledger=True)


def test_the_owner_reseals_as_the_entry_changes(spent):
  ledger, _ = spent
  withdrawn = _entry("lost/race", budget=100.0)
  ledger.reserve(withdrawn)
  ledger.release(withdrawn.promotion)
  [entry] = ledger_lib.Ledger(ledger.tracking_uri).entries()
  assert entry.promoted_run_id == "promoted-run"


def test_the_seal_covers_what_counts_and_not_what_comes_later():
  params = {"batch_size": "512", "budget": "2.0", "key_id": "ab"}
  tags = {ledger_lib.IDENTITY_TAG: "id", ledger_lib.PROMOTION_TAG: "p"}
  seal = ledger_seal.mac(KEY, "run", params, tags)
  assert seal == ledger_seal.mac(KEY, "run", {
      **params, "custody.place.0": "host:/x", "sequence": "1:2"}, tags)
  changed = [
      ledger_seal.mac(KEY, "another-run", params, tags),
      ledger_seal.mac(b"o" * 32, "run", params, tags),
      ledger_seal.mac(KEY, "run", {**params, "budget": "3.0"}, tags),
      *(ledger_seal.mac(KEY, "run", params, {**tags, tag: "x"})
        for tag in ledger_seal.COVERED_TAGS),
  ]
  assert seal not in changed and len(set(changed)) == len(changed)


def test_a_charge_under_way_is_not_an_edit(spent):
  """A reader between an entry's tags and its params (its charge under
  way) skips it rather than refusing the ledger."""
  ledger, _ = spent
  ledger.client.create_run(ledger.experiment_id, tags={
      "tan_tune.kind": ledger_lib.ENTRY_KIND,
      ledger_lib.PROMOTION_TAG: "under/way"})
  assert [e.promotion for e in ledger.entries()] == ["search/trial/attempt"]
