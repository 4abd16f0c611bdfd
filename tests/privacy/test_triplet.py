"""Tests of the TAN quantities: exact arithmetic, checked against the paper."""

import dataclasses
import math

from hypothesis import given
from hypothesis import strategies as st
import pytest

from tan_tune.errors import ConfigError
from tan_tune.privacy import triplet as triplet_lib

IMAGENET = triplet_lib.PrivacyTriplet(1281167, 16384, 2.5, 72000)


def test_definitions_match_the_paper():
  t = IMAGENET
  q = 16384 / 1281167
  assert t.sampling_rate == pytest.approx(q)
  assert t.eta_step == pytest.approx(q / (math.sqrt(2) * 2.5))
  assert t.eta**2 == pytest.approx(q**2 * 72000 / (2 * 2.5**2))
  assert t.total_amount_of_noise == pytest.approx(1 / t.eta)
  assert t.epochs == pytest.approx(72000 * q)


def test_eps_tan_matches_table_6():
  # TAN table 6: ImageNet (1.2M), delta = 8e-7 -> eps_TAN 8.26; half of it
  # (0.6M), delta = 16e-7 -> 18.06. The paper rounds q and delta.
  full = IMAGENET
  half, half_delta = triplet_lib.scale_dataset(full, 0.5, 8e-7)
  assert full.eps_tan(8e-7) == pytest.approx(8.26, abs=0.1)
  assert half.eps_tan(half_delta) == pytest.approx(18.06, abs=0.15)
  assert half.eta == pytest.approx(2 * full.eta, rel=1e-5)


@given(
    dataset_size=st.integers(1000, 10**7),
    q=st.floats(1e-4, 0.25),
    sigma=st.floats(0.3, 20),
    steps=st.integers(100, 10**6),
    delta=st.floats(1e-10, 1e-3),
)
def test_doubling_q_and_quartering_steps_keeps_eps_tan(
    dataset_size, q, sigma, steps, delta
):
  batch_size = max(1, round(q * dataset_size))
  if 2 * batch_size > dataset_size:
    return
  t = triplet_lib.PrivacyTriplet(dataset_size, batch_size, sigma, 4 * steps)
  doubled = dataclasses.replace(t, batch_size=2 * batch_size, steps=steps)
  assert doubled.eps_tan(delta) == pytest.approx(t.eps_tan(delta), rel=1e-12)


@given(
    ratio=st.sampled_from([2, 4, 8, 16, 32, 64, 128]),
    sigma=st.floats(1, 10),
)
def test_simulate_keeps_steps_and_eta_step(ratio, sigma):
  reference = triplet_lib.PrivacyTriplet(1281167, 128 * 128, sigma, 72000)
  simulated = triplet_lib.simulate(reference, reference.batch_size // ratio)
  assert simulated.steps == reference.steps
  assert simulated.eta_step == pytest.approx(reference.eta_step, rel=1e-12)
  assert simulated.noise_multiplier == pytest.approx(sigma / ratio)
  assert triplet_lib.compute_saving(reference, simulated) == ratio


def test_simulate_rejects_a_larger_batch():
  with pytest.raises(ConfigError, match="simulate_batch_size"):
    triplet_lib.simulate(IMAGENET, 32768)


def test_constant_eta_triplets_reproduce_table_3_and_4():
  alternatives = triplet_lib.constant_eta_triplets(
      IMAGENET, [9000, 18000, 72000, 288000]
  )
  by_steps = {alt.triplet.steps: alt for alt in alternatives}
  # Table 4: S = 18k at B = 32768, lr 32 = 8 x 4; table 3: lr 64, 32, 8, 2.
  assert by_steps[18000].triplet.batch_size == 32768
  assert by_steps[288000].triplet.batch_size == 8192
  assert [by_steps[s].lr_scale * 8 for s in (9000, 18000, 72000, 288000)] == [
      64, 32, 8, 2
  ]
  for alt in alternatives:
    assert alt.triplet.noise_multiplier == IMAGENET.noise_multiplier
    assert alt.triplet.eta == pytest.approx(IMAGENET.eta, rel=1e-4)


def test_simulated_alternatives_reproduce_table_3():
  # Table 3 simulates B_ref = 16384 at 256: S = 18k runs at B = 512.
  simulated_reference = triplet_lib.simulate(IMAGENET, 256)
  alternatives = triplet_lib.constant_eta_triplets(IMAGENET, [18000, 288000])
  simulated = [
      triplet_lib.simulate_alternative(alt, IMAGENET, simulated_reference)
      for alt in alternatives
  ]
  assert [s.triplet.batch_size for s in simulated] == [512, 128]
  for alt, sim in zip(alternatives, simulated):
    assert sim.triplet.steps == alt.triplet.steps
    assert sim.triplet.noise_multiplier == pytest.approx(2.5 / 64)
    assert sim.triplet.eta_step == pytest.approx(alt.triplet.eta_step)
    assert sim.lr_scale == alt.lr_scale


def test_constant_eta_triplet_that_needs_more_than_n():
  with pytest.raises(ConfigError, match="steps_grid"):
    triplet_lib.constant_eta_triplets(IMAGENET, [10])


@pytest.mark.parametrize(
    "sigma, expected",
    [
        (0.3, triplet_lib.Regime.WALL),
        (0.5, triplet_lib.Regime.TRANSITION),
        (1.99, triplet_lib.Regime.TRANSITION),
        (2.0, triplet_lib.Regime.TAN),
        (8.0, triplet_lib.Regime.TAN),
    ],
)
def test_regime_boundaries(sigma, expected):
  t = dataclasses.replace(IMAGENET, noise_multiplier=sigma)
  assert triplet_lib.regime(t) is expected
  assert expected.explanation


def test_scale_dataset_divides_q_and_delta_by_beta():
  scaled, delta = triplet_lib.scale_dataset(IMAGENET, 2.0, 1e-6)
  assert scaled.dataset_size == 2 * IMAGENET.dataset_size
  assert delta == pytest.approx(5e-7)
  assert scaled.sampling_rate == pytest.approx(IMAGENET.sampling_rate / 2)


def test_eta_for_eps_tan_inverts_eps_tan():
  eta = triplet_lib.eta_for_eps_tan(8.0, 1e-6)
  t = triplet_lib.PrivacyTriplet(10**6, 1000, 1.0, 1)
  t = dataclasses.replace(t, noise_multiplier=t.sampling_rate / (math.sqrt(2) * eta))
  assert t.eps_tan(1e-6) == pytest.approx(8.0)


@pytest.mark.parametrize(
    "field, kwargs",
    [
        ("dataset_size", dict(dataset_size=0)),
        ("batch_size", dict(batch_size=-5)),
        ("batch_size", dict(batch_size=2_000_000)),
        ("noise_multiplier", dict(noise_multiplier=0.0)),
        ("noise_multiplier", dict(noise_multiplier=float("nan"))),
        ("steps", dict(steps=2.5)),
        ("steps", dict(steps=True)),
    ],
)
def test_bad_triplets_name_the_field(field, kwargs):
  with pytest.raises(ConfigError) as error:
    dataclasses.replace(IMAGENET, **kwargs)
  assert error.value.field == field
  assert field in str(error.value)


@pytest.mark.parametrize("delta", [0.0, 1.0, 1.5, -1e-5])
def test_bad_delta(delta):
  with pytest.raises(ConfigError, match="delta"):
    IMAGENET.eps_tan(delta)


def test_rescale_keeps_steps_and_eta_step_both_ways():
  down = triplet_lib.rescale(IMAGENET, 128)
  up = triplet_lib.rescale(down, IMAGENET.batch_size)
  assert down.eta_step == pytest.approx(IMAGENET.eta_step)
  assert down.steps == IMAGENET.steps
  assert up.noise_multiplier == pytest.approx(IMAGENET.noise_multiplier)
