"""Tests of the privacy ledger on a real MLflow store (sqlite)."""

import dataclasses

from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant
from mlflow.entities import ViewType
import numpy as np
import pytest

from tan_tune.errors import ConfigError
from tan_tune.ledger import charge
from tan_tune.ledger import composition as composition_lib
from tan_tune.ledger import ledger as ledger_lib
from tan_tune.privacy import accountant_registry
from tan_tune.privacy import accounting
from tan_tune.privacy import mechanisms
from tan_tune.privacy import repeat_and_select
from tan_tune.privacy import trial_count
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.training import datasets
import digits_data

DIGITS_N = 1437


def _entry(promotion, sigma=4.0, budget=8.0, identity="digits-id"):
  triplet = triplet_lib.PrivacyTriplet(DIGITS_N, 512, sigma, 100)
  return ledger_lib.Entry(
      dataset_identity=identity, dataset_name="digits", promotion=promotion,
      triplet=triplet, delta=1 / DIGITS_N,
      epsilon=accounting.epsilon(triplet).epsilon, budget=budget)


@pytest.fixture
def ledger(migrated_mlflow_db):
  return ledger_lib.Ledger(migrated_mlflow_db)


def test_reading_an_empty_store_creates_no_ledger(tmp_path):
  ledger = ledger_lib.Ledger(f"sqlite:///{tmp_path}/mlflow.db")
  assert ledger.entries() == []
  assert not (tmp_path / "mlflow.db").exists()
  ledger.client.search_experiments()  # The store exists, the ledger not yet.
  assert ledger.entries() == []
  assert ledger.client.get_experiment_by_name(
      ledger_lib.LEDGER_EXPERIMENT) is None


def test_an_entry_is_charged_once_and_read_back(ledger):
  entry = _entry("search-1/trial-a")
  assert ledger.reserve(entry)
  assert not ledger.reserve(entry)  # A resumed promotion: the same charge.
  [read] = ledger.entries("digits-id")
  assert read == entry
  ledger.link(entry.promotion, "run-123")
  assert ledger.entries()[0].promoted_run_id == "run-123"
  assert ledger.entries("another-dataset") == []


def test_composition_is_by_dataset_and_never_counts_a_run_twice(ledger):
  first, second = _entry("s1/a"), _entry("s2/b")
  ledger.reserve(first)
  ledger.reserve(_entry("s1/c", identity="other-data"))
  alone = composition_lib.compose(ledger.entries("digits-id"), first)
  assert alone.earlier == () and alone.spent.epsilon == 0
  assert alone.total.epsilon == pytest.approx(first.epsilon)
  both = composition_lib.compose(ledger.entries("digits-id"), second)
  assert [e.promotion for e in both.earlier] == ["s1/a"]
  assert both.spent.epsilon == pytest.approx(first.epsilon)
  # RDP composes below the sum of the two epsilons, above either.
  assert first.epsilon < both.total.epsilon < 2 * first.epsilon
  assert both.within_budget


def test_the_budget_is_the_tightest_any_run_declared(ledger):
  ledger.reserve(_entry("s1/a", budget=4.0))
  composition = composition_lib.compose(ledger.entries(), _entry("s2/b",
                                                            budget=50.0))
  assert composition.budget == 4.0 and not composition.within_budget


def test_of_two_charges_at_once_the_first_placed_runs(ledger):
  """Both reserved before either checked: the store's order decides, and
  every reader alike. The first fits and counts; the second, composed with
  it, does not (before the order, both refused)."""
  first, second = _entry("s1/a", sigma=2.5), _entry("s2/b", sigma=2.5)
  assert composition_lib.compose([], first).within_budget
  ledger.reserve(first)
  ledger.reserve(second)
  assert ledger.entries_before(first) == []
  assert [e.promotion for e in ledger.entries_before(second)] == ["s1/a"]
  assert not composition_lib.compose(ledger.entries_before(second),
                                     second).within_budget
  assert [e.promotion for e in ledger.entries()] == ["s1/a"]
  ledger.release(second.promotion)
  assert [e.promotion for e in ledger.entries()] == ["s1/a"]


def test_without_a_new_run_the_composition_is_what_was_spent(ledger):
  first, second = _entry("s1/a", budget=9.0), _entry("s2/b")
  spent = composition_lib.compose([first, second])
  assert spent.earlier == (first, second) and spent.budget == 8.0
  assert spent.total.epsilon == spent.spent.epsilon == pytest.approx(
      composition_lib.compose([first], second).total.epsilon)


def test_a_private_search_is_one_entry_that_composes_with_runs(ledger):
  from tan_tune.privacy import sampling_scheme  # pylint: disable=g-import-not-at-top
  from tan_tune.privacy import tuning  # pylint: disable=g-import-not-at-top

  count = trial_count.TrialCount("logarithmic", 5)
  run = _entry("s1/a")
  report = tuning.search_epsilon(run.triplet, 1 / DIGITS_N, count, 5.0)
  search = ledger_lib.Entry(
      dataset_identity="digits-id", dataset_name="digits",
      promotion="s2/search", triplet=run.triplet, delta=1 / DIGITS_N,
      epsilon=report.epsilon, budget=20.0, trial_count=count,
      score_noise=5.0)
  ledger.reserve(run)
  ledger.reserve(search)
  read = ledger.entries("digits-id")
  # Alone, the search is priced by the tighter selection bound, named.
  assert read[1] == search and read[1].score_noise == 5.0
  assert read[1].accountant == read[1].as_dict()["accountant"] == (
      report.accountant) == "pld-selection-profile"
  both = composition_lib.compose(read[:1], read[1])
  assert both.total.accountant == "rdp-repeat-and-select"
  # Beside a run, only RDP composes: more than the search alone (either
  # bound), less than the run's eps plus the search's RDP bound.
  search_rdp = accountant_registry.named("rdp-repeat-and-select").epsilon(
      [search.event], 1 / DIGITS_N)
  assert search_rdp > search.epsilon
  assert search_rdp < both.total.epsilon < search_rdp + run.epsilon
  # As the engine's curves add: the run's and the search's (Papernot &
  # Steinke on the trial's exact curve, its score's alpha / 2s^2 added),
  # converted once.
  t = run.triplet
  orders = np.asarray(mechanisms.RDP_ORDERS)
  curve = t.steps * mechanisms.poisson_rdp(t.sampling_rate,
                                           float(t.noise_multiplier))
  curve = curve + repeat_and_select.selection_rdp(
      orders, curve + orders / (2 * 5.0**2), count)
  assert both.total.epsilon == pytest.approx(
      mechanisms.rdp_to_epsilon(curve, 1 / DIGITS_N), abs=1e-12)
  # Never above dp_accounting's own accountant, whose series at fractional
  # orders bounds the terms' absolute values, on fewer orders.
  step = dp_event.PoissonSampledDpEvent(t.sampling_rate,
                                        dp_event.GaussianDpEvent(
                                            t.noise_multiplier))
  trial = dp_event.SelfComposedDpEvent(step, t.steps)
  scored = dp_event.ComposedDpEvent([trial, dp_event.GaussianDpEvent(5.0)])
  independent = rdp_privacy_accountant.RdpAccountant()
  independent.compose(trial)
  independent.compose(dp_event.RepeatAndSelectDpEvent(scored, 5, 0.0))
  assert both.total.epsilon <= independent.get_epsilon(1 / DIGITS_N)
  fixed = dataclasses.replace(
      run, promotion="s3/b", scheme=sampling_scheme.SamplingScheme("fixed"))
  with pytest.raises(ConfigError, match="the selection bounds know that"
                     " trial only"):
    composition_lib.compose([*read, fixed])


def _entry_run(ledger, promotion):
  [run] = ledger.client.search_runs(
      [ledger.experiment_id], run_view_type=ViewType.ALL,
      filter_string=f"tags.`{ledger_lib.PROMOTION_TAG}` = '{promotion}'")
  return run.info.run_id


def test_deleted_entries_and_a_deleted_ledger_still_count(ledger):
  """Deleting MLflow runs is a clean-up, not a refund (issue 26)."""
  entry = _entry("s1/a/attempt-1")
  ledger.reserve(entry)
  ledger.link(entry.promotion, "promoted-run")
  ledger.client.delete_run(_entry_run(ledger, entry.promotion))
  assert ledger.entries("digits-id") == [
      dataclasses.replace(entry, promoted_run_id="promoted-run")]
  assert not ledger.reserve(entry)  # Still charged: not charged twice.
  ledger.client.delete_experiment(ledger.experiment_id)
  assert len(ledger_lib.Ledger(ledger.tracking_uri).entries()) == 1
  # A new charge brings the ledger back, the old entry with it.
  assert ledger_lib.Ledger(ledger.tracking_uri).reserve(_entry("s2/b/x"))
  assert [e.promotion for e in ledger.entries()] == ["s1/a/attempt-1",
                                                     "s2/b/x"]


def test_an_entry_names_one_run_and_is_never_relinked(ledger):
  entry = _entry("s1/a/attempt-1")
  ledger.reserve(entry)
  assert ledger.link(entry.promotion, "first-run")
  assert ledger.link(entry.promotion, "first-run")  # A resumed run.
  assert not ledger.link(entry.promotion, "second-run")
  assert [e.promoted_run_id for e in ledger.entries()] == ["first-run"]
  assert not ledger.link("s1/a/never-charged", "first-run")
  # A deleted entry keeps its run, and still takes a first one.
  other = _entry("s1/a/attempt-2")
  ledger.reserve(other)
  ledger.client.delete_run(_entry_run(ledger, other.promotion))
  assert ledger.link(other.promotion, "third-run")
  assert not ledger.link(other.promotion, "fourth-run")
  assert [e.promoted_run_id for e in ledger.entries()] == ["first-run",
                                                           "third-run"]


def test_each_attempt_is_its_own_entry():
  first, second = ledger_lib.new_attempt(), ledger_lib.new_attempt()
  assert first != second and len(first) == 12
  assert ledger_lib.promotion_key("s1", "a", first) == f"s1/a/{first}"
  assert ledger_lib.promotion_key("s1", "a", first) != (
      ledger_lib.promotion_key("s1", "a", second))
  assert ledger_lib.promotion_key("s1", "search") == "s1/search"


def test_a_withdrawn_charge_is_kept_and_skipped_a_linked_one_counts(ledger):
  lost, linked = _entry("s1/a/x"), _entry("s2/b/y")
  for entry in (lost, linked):
    ledger.reserve(entry)
  ledger.release(lost.promotion)
  run = ledger.client.get_run(_entry_run(ledger, lost.promotion))
  assert run.info.lifecycle_stage == "active"  # Withdrawn, not deleted.
  assert run.data.tags[ledger_lib.WITHDRAWN_TAG] == "true"
  assert [e.promotion for e in ledger.entries()] == ["s2/b/y"]
  # Charged again (the same attempt retried): one entry, linked once.
  assert ledger.reserve(lost)
  assert ledger.link(lost.promotion, "run-1")
  assert [e.promotion for e in ledger.entries()] == ["s2/b/y", "s1/a/x"]
  # An entry that names a run spent the budget: withdrawing it changes
  # nothing.
  ledger.link(linked.promotion, "run-2")
  ledger.release(linked.promotion)
  assert [e.promoted_run_id for e in ledger.entries()] == ["run-2", "run-1"]


def _digits(**kwargs) -> datasets.Examples:
  """The digits' examples: built in, or through a factory (`digits_data`)."""
  config = (datasets.DatasetConfig(None, factory="digits_data:digits_floats",
                                   kwargs=kwargs)
            if kwargs else digits_data.DIGITS)
  return datasets.examples(datasets.load_dataset(config))


def _full_budget(promotion, examples) -> ledger_lib.Entry:
  """A run that spends the whole of its budget."""
  entry = _entry(promotion, identity=examples)
  return dataclasses.replace(entry, budget=entry.epsilon)


def test_the_same_digits_however_held_are_one_dataset_with_one_budget(
    ledger):
  """Built in, float tensors from a factory, zeros stored as -0.0: three
  ledgers for one dataset let one store accept three full-budget runs."""
  built_in = _digits()
  others = [_digits(dtype="float64"), _digits(negative_zeros=True)]
  identities = {ledger.identity(e) for e in [built_in, *others]}
  assert len(identities) == 1 and len(next(iter(identities))) == 64
  charge.charge(ledger, _full_budget("first/run", built_in), True)
  for i, examples in enumerate(others):
    with pytest.raises(ConfigError, match="has already spent eps"):
      charge.charge(ledger, _full_budget(f"again/{i}", examples), True)
  assert len(ledger.entries()) == 1


def test_people_see_a_ledger_id_the_key_derives_for_every_charge(ledger):
  examples = _digits()
  ledger.reserve(_entry("first/run", identity=examples))
  ledger.reserve(_entry("second/run", identity=examples))
  ledger.reserve(_entry("other/run", identity="another-dataset"))
  first, second = ledger.entries(examples)
  other, = ledger.entries("another-dataset")
  assert first.ledger_id == second.ledger_id != other.ledger_id
  assert len(first.ledger_id) == 8
  shown = first.as_dict()
  assert shown["ledger_id"] == first.ledger_id
  assert "dataset_identity" not in shown


def test_the_ledger_holds_no_window_of_the_unkeyed_fingerprint(ledger):
  """An adversary who knows every other example hashes the data with and
  without a target: the unkeyed digest of the examples is a membership
  oracle, and was the ledger's tag and the promoted run's param."""
  examples = _digits()
  ledger.reserve(_entry("first/run", identity=examples))
  runs = ledger.client.search_runs([ledger.experiment_id],
                                   run_view_type=ViewType.ALL)
  fields = [{**run.data.params, **run.data.tags} for run in runs]
  assert fields and not digits_data.leaked_windows(repr(fields))
  assert ledger_lib.IDENTITY_TAG in fields[0]
