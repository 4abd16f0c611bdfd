"""tan_tune.privacy.accountants: events, the registry and the one engine."""

from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant
import numpy as np
from opacus.accountants.analysis import rdp as opacus_rdp
import pytest

from tan_tune.errors import ConfigError
from tan_tune.privacy import accountant_registry
from tan_tune.privacy import accountants
from tan_tune.privacy import accounting
from tan_tune.privacy import mechanisms
from tan_tune.privacy import repeat_and_select
from tan_tune.privacy import run_accountants
from tan_tune.privacy import selection_profile
from tan_tune.privacy.accountants import RunEvent, SearchEvent
from tan_tune.privacy.clipping_bound import JlBound
from tan_tune.privacy.sampling_scheme import POISSON, SamplingScheme
from tan_tune.privacy.trial_count import TrialCount
from tan_tune.privacy.triplet import PrivacyTriplet

DIGITS = PrivacyTriplet(1437, 512, 3.918, 40)
DIGITS_DELTA = 1 / 1437
SIX_TRIALS = TrialCount("logarithmic", 6.0)


def test_every_accountant_a_scheme_names_is_registered():
  for name in accountant_registry.offered_names():
    assert accountant_registry.named(name).name == name
  assert accountant_registry.named("rdp-repeat-and-select").covers(
      SearchEvent(RunEvent(DIGITS), SIX_TRIALS))
  assert accountant_registry.named("pld-selection-profile").covers(
      SearchEvent(RunEvent(DIGITS), SIX_TRIALS, 5.0))
  with pytest.raises(ConfigError) as error:
    accountant_registry.named("moments")
  assert error.value.field == "accountant" and "rdp, " in str(error.value)


def test_the_gate_uses_the_exact_series():
  # The digits demo's old sigma 3.918: 1.99983 under the exact series, as
  # Opacus' RDP accountant gives it; dp_accounting's bound, which drops
  # several fractional orders here, puts it over budget.
  step = dp_event.PoissonSampledDpEvent(512 / 1437,
                                        dp_event.GaussianDpEvent(3.918))
  bound = rdp_privacy_accountant.RdpAccountant()
  bound.compose(step, 40)
  eps = accountant_registry.named("rdp").epsilon([RunEvent(DIGITS)],
                                                 DIGITS_DELTA)
  orders = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64))
  curve = opacus_rdp.compute_rdp(q=512 / 1437, noise_multiplier=3.918,
                                 steps=40, orders=orders)
  opacus_eps, _ = opacus_rdp.get_privacy_spent(orders=orders, rdp=curve,
                                               delta=DIGITS_DELTA)
  assert eps == pytest.approx(opacus_eps, abs=1e-9)
  assert eps < 2.0 < bound.get_epsilon(DIGITS_DELTA)
  assert accounting.epsilon(DIGITS).epsilon == eps


@pytest.mark.parametrize("schemes, expected", [
    ([POISSON], "rdp"),
    ([SamplingScheme(adjacency="replace-one")], "pld"),
    ([POISSON, POISSON], "rdp"),
    ([POISSON, SamplingScheme("fixed")], "rdp"),
    ([POISSON, SamplingScheme("truncated-poisson")], "pld"),
    ([POISSON, SamplingScheme(bound=JlBound(32))], "pld-jl"),
])
def test_composition_picks_the_first_accountant_that_covers_all(schemes,
                                                                 expected):
  events = [RunEvent(DIGITS, scheme) for scheme in schemes]
  assert accountants.for_composition(events).name == expected


def test_a_search_composes_with_runs_under_repeat_and_select_only():
  search = SearchEvent(RunEvent(DIGITS), SIX_TRIALS)
  assert accountants.for_composition([search]).name == "rdp-repeat-and-select"
  assert accountants.for_composition(
      [RunEvent(DIGITS), search]).name == "rdp-repeat-and-select"
  assert not accountant_registry.named("rdp").covers(search)
  with pytest.raises(ValueError, match="does not cover"):
    accountant_registry.named("pld").epsilon([search], DIGITS_DELTA)
  profile = accountant_registry.named("pld-selection-profile")
  assert not profile.covers(RunEvent(DIGITS))
  assert not profile.covers(SearchEvent(
      RunEvent(DIGITS, SamplingScheme("fixed")), SIX_TRIALS))
  with pytest.raises(ValueError, match="one search alone"):
    profile.epsilon([search, search], DIGITS_DELTA)


def test_a_search_alone_reports_the_smaller_bound_and_names_it():
  # Either may win; whichever does is reported under its name.
  for count in (SIX_TRIALS, TrialCount("poisson", 6.0),
                TrialCount("negative_binomial", 6.0, -0.5),
                TrialCount("negative_binomial", 100.0, -0.7)):
    search = SearchEvent(RunEvent(DIGITS), count, 5.0)
    bounds = {name: accountant_registry.named(name).epsilon([search],
                                                            DIGITS_DELTA)
              for name in accountants.SELECTION_BOUNDS}
    value, accountant = accountants.tightest_selection(search, DIGITS_DELTA)
    assert value == min(bounds.values()) == bounds[accountant.name]
    report = accounting.composed_epsilon([search], DIGITS_DELTA)
    assert (report.epsilon, report.accountant) == (value, accountant.name)
  # Beside a run, only RDP composes.
  both = accounting.composed_epsilon([RunEvent(DIGITS), search], DIGITS_DELTA)
  assert both.accountant == "rdp-repeat-and-select"


def test_a_scored_trial_adds_the_scores_gaussian_rdp():
  # One trial: S subsampled Gaussian steps, then a count of sensitivity 1
  # with Gaussian noise s, alpha / (2 s^2); then Papernot & Steinke.
  orders = np.asarray(mechanisms.RDP_ORDERS)
  trial = DIGITS.steps * mechanisms.poisson_rdp(DIGITS.sampling_rate,
                                                DIGITS.noise_multiplier)
  rdp = accountant_registry.named("rdp-repeat-and-select")
  np.testing.assert_array_equal(
      rdp.curve(SearchEvent(RunEvent(DIGITS), SIX_TRIALS, 5.0)),
      repeat_and_select.selection_rdp(orders, trial + orders / 50.0,
                                      SIX_TRIALS))
  np.testing.assert_array_equal(
      rdp.curve(SearchEvent(RunEvent(DIGITS), SIX_TRIALS)),
      repeat_and_select.selection_rdp(orders, trial, SIX_TRIALS))
  # The profile bound composes the score's PLD into the trial's.
  profile = accountant_registry.named("pld-selection-profile").epsilon(
      [SearchEvent(RunEvent(DIGITS), SIX_TRIALS, 5.0)], DIGITS_DELTA)
  assert profile == selection_profile.epsilon(
      selection_profile.trial_pld(DIGITS.sampling_rate,
                                  DIGITS.noise_multiplier, DIGITS.steps, 5.0),
      SIX_TRIALS, DIGITS_DELTA)


def test_no_accountant_composes_jl_with_fixed_size_batches():
  with pytest.raises(ConfigError, match="JL clipping compose only"):
    accountants.for_composition([
        RunEvent(DIGITS, SamplingScheme(bound=JlBound(32))),
        RunEvent(DIGITS, SamplingScheme("fixed"))])


def test_a_new_accountant_is_one_registered_class():
  @accountant_registry.register
  class Doubled(run_accountants.Rdp):  # pylint: disable=unused-variable
    name = "rdp-doubled"

    def covers(self, event):
      return isinstance(event, RunEvent)

    def _epsilon(self, events, delta):
      return 2 * super()._epsilon(events, delta)

  try:
    doubled = accountant_registry.named("rdp-doubled").epsilon(
        [RunEvent(DIGITS)], DIGITS_DELTA)
    assert doubled == 2 * accounting.epsilon(DIGITS).epsilon
  finally:
    del accountant_registry._REGISTRY["rdp-doubled"]  # pylint: disable=protected-access
