"""Total epsilons of every scheme against reference values computed
independently from each sampler's paper."""

import pytest

from tan_tune.privacy import accounting
from tan_tune.privacy.sampling_scheme import SamplingScheme
from tan_tune.privacy.triplet import PrivacyTriplet

CIFAR_EXAMPLE = (PrivacyTriplet(50_000, 120, 6.0, 104_166), 1e-5)
TAN_CIFAR = (PrivacyTriplet(50_000, 4096, 3.0, 2500), 1e-5)
TAN_IMAGENET = (PrivacyTriplet(1_281_167, 32768, 2.5, 18_000), 8e-7)


@pytest.mark.parametrize("setting, fswor_replace, fswor_add, wang, poisson", [
    (CIFAR_EXAMPLE, 1.118, 1.084, 2.321, 0.499),
    (TAN_CIFAR, 35.6, 18.55, 47.40, 7.098),
    (TAN_IMAGENET, 32.6, 21.62, 54.83, 7.980),
])
def test_totals_reproduce_the_note(setting, fswor_replace, fswor_add, wang,
                                   poisson):
  triplet, delta = setting

  def eps(sampler, adjacency="add/remove-one", accountant=None):
    return accounting.epsilon(triplet, delta, accountant,
                              SamplingScheme(sampler, adjacency)).epsilon

  # The note gives 35.6 and 32.6 to one decimal: they must round to them.
  digits = len(str(fswor_replace).split(".")[1])
  assert round(eps("fixed", "replace-one"), digits) == fswor_replace
  assert eps("fixed") == pytest.approx(fswor_add, abs=0.01)
  assert eps("fixed", "replace-one", "rdp-wang") == pytest.approx(wang,
                                                                  abs=0.01)
  assert eps("poisson") == pytest.approx(poisson, abs=0.01)


@pytest.mark.slow
@pytest.mark.parametrize("setting, poisson, caps", [
    (TAN_CIFAR, 6.580, {2: 7.575, 3: 6.632, 4: 6.581}),
    (TAN_IMAGENET, 7.492, {2: 8.771, 3: 7.568, 4: 7.494}),
])
def test_truncated_poisson_reproduces_the_note_and_tends_to_poisson(
    setting, poisson, caps):
  triplet, delta = setting
  assert accounting.epsilon(triplet, delta, "pld").epsilon == pytest.approx(
      poisson, abs=0.01)
  values = []
  for stds, expected in caps.items():
    scheme = SamplingScheme("truncated-poisson", truncation_stds=stds)
    values.append(accounting.epsilon(triplet, delta, scheme=scheme).epsilon)
    assert values[-1] == pytest.approx(expected, abs=0.01)
  # A larger cap truncates less: eps falls towards Poisson's.
  assert values == sorted(values, reverse=True)
  assert values[-1] >= poisson - 0.01


@pytest.mark.parametrize("scheme", [
    SamplingScheme("fixed"), SamplingScheme("fixed", "replace-one"),
    SamplingScheme("fixed-with-replacement"),
    SamplingScheme("truncated-poisson"), SamplingScheme("poisson", "replace-one"),
])
@pytest.mark.slow
def test_eps_grows_with_steps_and_with_the_sampling_rate(scheme):
  def eps(batch_size, steps):
    triplet = PrivacyTriplet(10_000, batch_size, 3.0, steps)
    return accounting.epsilon(triplet, 1e-5, scheme=scheme).epsilon

  by_steps = [eps(100, s) for s in (10, 100, 1000)]
  by_rate = [eps(b, 100) for b in (50, 100, 200)]
  assert by_steps == sorted(by_steps) and by_steps[0] < by_steps[-1]
  assert by_rate == sorted(by_rate) and by_rate[0] < by_rate[-1]


def test_calibration_and_max_steps_follow_the_scheme():
  fixed = SamplingScheme("fixed")
  sigma = accounting.calibrate_sigma(50_000, 4096, 2500, 8.0, 1e-5,
                                     scheme=fixed)
  spent = accounting.epsilon(PrivacyTriplet(50_000, 4096, sigma, 2500), 1e-5,
                             scheme=fixed)
  assert 7.99 < spent.epsilon <= 8.0
  # Fixed-size batches need more noise than Poisson for the same eps.
  assert sigma > accounting.calibrate_sigma(50_000, 4096, 2500, 8.0, 1e-5)
  steps = accounting.max_steps(50_000, 4096, 3.0, 8.0, 1e-5, scheme=fixed)
  assert accounting.epsilon(PrivacyTriplet(50_000, 4096, 3.0, steps), 1e-5,
                            scheme=fixed).epsilon <= 8.0
  assert accounting.epsilon(PrivacyTriplet(50_000, 4096, 3.0, steps + 1),
                            1e-5, scheme=fixed).epsilon > 8.0


def test_every_report_names_accountant_adjacency_and_sampler():
  triplet, delta = TAN_CIFAR
  report = accounting.epsilon(triplet, delta,
                              scheme=SamplingScheme("fixed", "replace-one"))
  assert report.describe() == (
      "eps = 35.600 at delta = 1e-05 (RDP accountant, replace-one adjacency,"
      " fixed-size batches of 4096 without replacement)")


@pytest.mark.slow
def test_the_fswr_floor_is_below_its_bound():
  triplet = PrivacyTriplet(1797, 64, 3.0, 40)
  upper = accounting.epsilon(triplet,
                             scheme=SamplingScheme("fixed-with-replacement"))
  floor = accounting.rdp_floor(triplet)
  assert 0 < floor.epsilon < upper.epsilon
  assert floor.accountant == "rdp (floor)"
