"""The ledger's order: of several charges at once, exactly those that fit
in the store's order count; renames and deletions change nothing."""

import pytest

from tan_tune.ledger import composition as composition_lib
from tan_tune.ledger import ledger as ledger_lib
from tan_tune.ledger import ledger_order
from tan_tune.privacy import accounting
from tan_tune.privacy import triplet as triplet_lib

DIGITS_N = 1437


def _entry(promotion, budget=100.0, sigma=4.0):
  triplet = triplet_lib.PrivacyTriplet(DIGITS_N, 512, sigma, 100)
  return ledger_lib.Entry(
      dataset_identity="digits-id", dataset_name="digits",
      promotion=promotion, triplet=triplet, delta=1 / DIGITS_N,
      epsilon=accounting.epsilon(triplet).epsilon, budget=budget)


def _fits_two() -> float:
  """A budget two of `_entry`'s runs fit in, three not."""
  two = composition_lib.compose([_entry("a")], _entry("b")).total.epsilon
  three = composition_lib.compose([_entry("a"), _entry("b")],
                                  _entry("c")).total.epsilon
  assert two < three
  return (two + three) / 2


@pytest.fixture
def ledger(migrated_mlflow_db, monkeypatch):
  monkeypatch.delenv("TAN_TUNE_LEDGER_KEY_FILE", raising=False)
  return ledger_lib.Ledger(migrated_mlflow_db)


def _decisions(ledger, entries):
  """What each charge's own recheck decides (`charge.reserve_and_recheck`)."""
  return [composition_lib.compose(ledger.entries_before(e), e).within_budget
          for e in entries]


def test_places_order_by_the_order_then_the_version():
  assert ledger_order.Place(5, 2) < ledger_order.Place(5, 10) < (
      ledger_order.Place(6, 1))
  assert ledger_order.Place.parse(ledger_order.Place(17, 3).text()) == (
      ledger_order.Place(17, 3))


def test_of_four_charges_at_once_that_fit_two_exactly_two_count(ledger):
  """All four reserve before any checks: each decides alone what every
  reader decides, and the readers agree."""
  budget = _fits_two()
  charges = [_entry(f"run/{i}", budget) for i in range(4)]
  for entry in charges:
    assert ledger.reserve(entry)
  assert _decisions(ledger, charges) == [True, True, False, False]
  assert [e.promotion for e in ledger.entries()] == ["run/0", "run/1"]
  # The losers withdraw; nothing changes.
  for entry in charges[2:]:
    ledger.release(entry.promotion)
  assert _decisions(ledger, charges[:2]) == [True, True]
  assert [e.promotion for e in ledger.entries()] == ["run/0", "run/1"]


def test_a_refused_charge_makes_room_for_a_later_one_that_fits(ledger):
  """A charge too big to fit is refused; the next one is composed without
  it (before the order, it was counted until withdrawn)."""
  big, small = _entry("big", 10.0, sigma=0.6), _entry("small", 10.0)
  ledger.reserve(big)
  ledger.reserve(small)
  assert _decisions(ledger, [big, small]) == [False, True]


def test_a_charge_not_yet_placed_counts_nothing_until_placed(ledger):
  entry = _entry("crashed/before/its/place")
  run_id = ledger._create(entry)  # pylint: disable=protected-access
  assert ledger.entries() == []
  assert not ledger.reserve(entry)  # The resume places it.
  assert ledger.client.get_run(run_id).data.params["sequence"]
  assert [e.promotion for e in ledger.entries()] == [entry.promotion]


def test_renaming_the_ledger_or_deleting_its_order_changes_nothing(ledger):
  budget = _fits_two()
  first = [_entry(f"old/{i}", budget) for i in range(2)]
  for entry in first:
    ledger.reserve(entry)
  ledger.client.rename_experiment(ledger.experiment_id, "nothing-to-see")
  ledger.client.delete_registered_model(ledger_order.ORDER_MODEL)
  renamed = ledger_lib.Ledger(ledger.tracking_uri)
  assert [e.promotion for e in renamed.entries()] == ["old/0", "old/1"]
  # A new experiment and a new order: the old entries come first.
  late = _entry("new/0", budget)
  assert renamed.reserve(late)
  assert renamed.experiment_id != ledger.experiment_id
  assert _decisions(renamed, [late]) == [False]
  assert [e.promotion for e in renamed.entries()] == ["old/0", "old/1"]
