"""Extreme but valid settings: every accountant answers or says why not."""

import pytest

from tan_tune.privacy import accounting
from tan_tune.privacy import jl_accounting
from tan_tune.privacy import limits
from tan_tune.privacy import report as privacy_report
from tan_tune.privacy.sampling_scheme import SamplingScheme
from tan_tune.privacy.triplet import PrivacyTriplet
from tan_tune.promote import gate

# The example: PRV alone tried to allocate 89.7 GiB.
EXTREME = PrivacyTriplet(1000, 10, 0.3, 1_000_000)


def test_numerical_accountants_say_why_they_do_not_answer():
  report = privacy_report.privacy_report(EXTREME)
  assert set(report.epsilons) == {"rdp"}  # Closed forms answer anything.
  assert set(report.unavailable) == {"prv", "pld"}
  for reason in report.unavailable.values():
    assert "grid would need" in reason and "at most 2e+07" in reason
  assert report.as_dict()["unavailable"] == report.unavailable
  with pytest.raises(limits.AccountantLimit, match="PRV accountant: outside"):
    accounting.epsilon(EXTREME, accountant="prv")


@pytest.mark.slow
def test_calibration_steps_over_settings_out_of_reach():
  # Small sigmas are out of PLD's reach here; the root is not.
  sigma = accounting.calibrate_sigma(1000, 10, 100_000, 20.0,
                                     accountant="pld")
  spent = accounting.epsilon(PrivacyTriplet(1000, 10, sigma, 100_000),
                             accountant="pld").epsilon
  assert spent <= 20.0
  assert accounting.max_steps(1000, 10, 0.3, 5.0, accountant="pld") >= 1


def test_the_gate_refuses_a_setting_its_accountant_cannot_compute():
  with pytest.raises(gate.PromotionRefused, match="outside what it can"):
    gate.check_budget(PrivacyTriplet(1000, 10, 2.0, 10**9), 1e-3, 1e6,
                      SamplingScheme("truncated-poisson"))


def test_jl_components_too_wide_for_a_grid_are_refused_not_tried():
  with pytest.raises(limits.AccountantLimit, match="PLD-JL"):
    jl_accounting.jl_epsilon(1e-4, 0.2, 1, 1e-5, 6)


@pytest.mark.parametrize("adjacency", ["add/remove-one", "replace-one"])
def test_a_fixed_batch_of_the_whole_dataset_is_a_gaussian_of_sensitivity_2c(
    adjacency):
  # q = 1: no subsampling; RDP(alpha) = alpha (2C)^2 / (2 sigma^2 C^2).
  whole = PrivacyTriplet(100, 100, 50.0, 10)
  spent = accounting.epsilon(whole, scheme=SamplingScheme("fixed", adjacency))
  gaussian = accounting.epsilon(
      PrivacyTriplet(100, 100, 25.0, 10), accountant="rdp")  # sigma / 2.
  assert spent.epsilon == pytest.approx(gaussian.epsilon, rel=1e-6)


def test_fixed_size_batches_with_replacement_past_their_reach_say_so():
  with pytest.raises(limits.AccountantLimit, match="B = 1,000,000"):
    accounting.epsilon(PrivacyTriplet(10**9, 10**6, 0.5, 10),
                       scheme=SamplingScheme("fixed-with-replacement"))
