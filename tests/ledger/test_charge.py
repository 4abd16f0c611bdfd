"""Tests of the ledger's charge protocol on a real MLflow store (sqlite)."""

import pytest

from tan_tune.errors import ConfigError
from tan_tune.ledger import charge
from tan_tune.ledger import ledger as ledger_lib
from tan_tune.privacy import accounting
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.promote import gate

# The digits' reference run: N = 1437, B = 512, sigma = 4, S = 100.
TRIPLET = triplet_lib.PrivacyTriplet(1437, 512, 4.0, 100)


def _run(promotion: str, budget_share: float = 1.0) -> ledger_lib.Entry:
  """A run on the digits whose eps is `budget_share` of its budget."""
  epsilon = accounting.epsilon(TRIPLET).epsilon
  return ledger_lib.Entry(
      dataset_identity="digits-id", dataset_name="digits",
      promotion=promotion, triplet=TRIPLET, delta=1 / 1437, epsilon=epsilon,
      budget=epsilon / budget_share)


@pytest.fixture
def ledger(migrated_mlflow_db):
  return ledger_lib.Ledger(migrated_mlflow_db)


def test_a_store_that_never_saw_the_dataset_is_charged_only_when_told(
    ledger):
  with pytest.raises(ConfigError, match="--new-ledger.*has no ledger entry"):
    charge.charge(ledger, _run("first/run", 0.5), new_ledger=False)
  assert not ledger.entries()
  charge.charge(ledger, _run("first/run", 0.5), new_ledger=True)
  # Known now: the second half of the budget needs no --new-ledger.
  charge.charge(ledger, _run("second/run", 0.5), new_ledger=False)
  assert [e.promotion for e in ledger.entries()] == ["first/run",
                                                      "second/run"]


def test_checking_room_charges_nothing_and_names_the_budgets_field(ledger):
  charge.check_room(ledger, _run("first/run"), new_ledger=True)
  assert not ledger.entries()
  charge.charge(ledger, _run("first/run"), new_ledger=True)
  with pytest.raises(ConfigError,
                     match="--target-epsilon.*has already spent eps"):
    charge.check_room(ledger, _run("second/run"), False, "--target-epsilon")


def test_a_charge_that_lost_a_race_is_withdrawn_and_refused(ledger,
                                                            monkeypatch):
  """Another run charges the dataset between the check and this charge:
  the re-check refuses, as its caller refuses (a run's ConfigError, a
  promotion's refusal: one protocol), and withdraws this charge."""
  rival = _run("rival/run")
  reserve = ledger.reserve

  def reserve_after_the_rival(entry):
    reserve(rival)
    return reserve(entry)

  monkeypatch.setattr(ledger, "reserve", reserve_after_the_rival)
  with pytest.raises(ConfigError, match="has already spent eps"):
    charge.charge(ledger, _run("our/run"), True)
  monkeypatch.setattr(ledger, "reserve", reserve)
  with pytest.raises(gate.PromotionRefused, match="has already spent eps"):
    charge.reserve_and_recheck(
        ledger, _run("promoted/run"),
        lambda composition: gate.check_ledger(composition, "digits"))
  assert [e.promotion for e in ledger.entries()] == ["rival/run"]
