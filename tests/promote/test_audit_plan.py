"""Tests of an audit's plan (`promote/audit_plan.py`)."""

import json
import pathlib

import numpy as np
import pytest

from tan_tune.cli import audit as audit_cli
from tan_tune.errors import ConfigError
from tan_tune.privacy import accounting
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.promote import audit_plan
from tan_tune.search import space as space_lib
from tan_tune.search import trials
from tan_tune.training import canaries

DEMO = "search_spaces/digits-demo.yaml"
TRAIN = "examples/train-digits.yaml"
DIGITS_N, DIGITS_TEST = 1437, 360


def _plan(target=DEMO, **options):
  return audit_plan.plan_audit(pathlib.Path(target), **options)


def test_a_search_file_is_audited_at_its_reference_run_and_the_spaces_centre():
  plan = _plan(canaries=100)
  space = space_lib.load_search_space(DEMO)
  audited = plan.audited
  assert audited.privacy.batch_size == 512
  assert audited.privacy.noise_multiplier == 3.9180
  assert audited.privacy.steps == 40
  assert audited.optim.lr == pytest.approx(
      trials.central_params(space)["lr"])
  assert plan.audited_size == DIGITS_N
  assert "reference run" in plan.source and plan.name == "digits-demo"


def test_the_audit_run_keeps_q_sigma_s_c_and_delta_on_its_universe():
  plan = _plan(canaries=400)
  # N_u: the base and every canary of both kinds, included or not.
  assert plan.dataset_size == DIGITS_TEST + 2 * 400
  privacy, audited = plan.config.privacy, plan.audited.privacy
  q = audited.batch_size / DIGITS_N
  assert abs(privacy.batch_size / plan.dataset_size - q) <= 0.5 / (
      plan.dataset_size)
  for field in ("noise_multiplier", "steps", "clip_norm", "sampling",
                "adjacency"):
    assert getattr(privacy, field) == getattr(audited, field)
  assert plan.delta == pytest.approx(1 / DIGITS_N)
  assert plan.config.clipping == plan.audited.clipping
  # So the audit's eps is the audited run's, up to B_a's rounding.
  assert plan.epsilon().epsilon == pytest.approx(
      plan.audited_epsilon().epsilon, abs=0.02)
  assert plan.epsilon().epsilon == accounting.epsilon(
      triplet_lib.PrivacyTriplet(plan.dataset_size, privacy.batch_size,
                                 privacy.noise_multiplier, privacy.steps),
      plan.delta).epsilon


def test_private_base_trains_on_the_training_split():
  plan = _plan(canaries=100, base=canaries.PRIVATE)
  assert plan.dataset_size == DIGITS_N + 2 * 100
  assert plan.as_dict()["base"] == "private"
  # At most 1 / N_u, as any private run's on its N.
  assert plan.delta == pytest.approx(1 / (DIGITS_N + 200))


def _plan_with_mask(monkeypatch, mask_seed, **options):
  monkeypatch.setattr(audit_plan.secrets, "randbits", lambda _: mask_seed)
  return _plan(**options)


@pytest.mark.parametrize("base", canaries.BASES)
def test_what_a_plan_publishes_is_the_same_whichever_canaries_are_in(
    monkeypatch, base):
  first, second = (_plan_with_mask(monkeypatch, seed, canaries=100, base=base)
                   for seed in (1, 2))
  kept = [sum(int(v.sum()) for v in plan.config.canaries.included().values())
          for plan in (first, second)]
  assert kept == [100, 97]  # N_a differs with the secret draw.
  assert first.as_dict() == second.as_dict()
  assert audit_cli.render_plan(first) == audit_cli.render_plan(second)
  assert first.epsilon() == second.epsilon()
  assert first.config.privacy == second.config.privacy
  assert first.as_dict()["universe_size"] == first.dataset_size
  assert "training_size" not in first.as_dict()
  text = audit_cli.render_plan(first)
  assert f"N_u = {first.dataset_size:,} (the universe" in text
  assert "N_a" not in text


def _fixed_config(tmp_path):
  path = tmp_path / "fixed.yaml"
  path.write_text(pathlib.Path(TRAIN).read_text().replace(
      "  clip_norm: 1.0\n", "  clip_norm: 1.0\n  sampling: fixed\n"))
  return path


def test_a_fixed_size_sampler_is_audited_on_public_data_only(tmp_path):
  path = _fixed_config(tmp_path)
  with pytest.raises(ConfigError, match="--base: 'private' is not allowed;"
                     " 'public' for a run with fixed sampling"):
    _plan(path, canaries=100, base=canaries.PRIVATE)
  # On public data: B of the rows present, N_a = base + included canaries.
  plan = _plan(path, canaries=100)
  kept = sum(int(v.sum()) for v in plan.config.canaries.included().values())
  assert plan.dataset_size == DIGITS_TEST + kept and not plan.universe
  assert plan.as_dict()["training_size"] == plan.dataset_size
  assert f"N_a = {plan.dataset_size:,}" in audit_cli.render_plan(plan)


def test_each_plan_draws_its_canaries_in_secret_and_never_shows_them():
  first, second = _plan(canaries=200), _plan(canaries=200)
  assert not np.array_equal(first.config.canaries.included()["input"],
                            second.config.canaries.included()["input"])
  seed = str(first.config.canaries.mask_seed)
  assert seed not in json.dumps(first.as_dict())
  assert seed not in repr(first)


def test_a_private_trial_config_is_audited_as_written():
  plan = _plan(TRAIN, canaries=100)
  assert plan.source == f"the run of {TRAIN}" and plan.name == "train-digits"
  assert plan.audited.privacy.claims_privacy


def test_a_search_directory_is_audited_at_its_winners_reference(
    tmp_path, searches):
  directory = searches.write(tmp_path)
  plan = _plan(directory, canaries=100)
  assert "trial best" in plan.source
  assert plan.audited.optim.lr == 2.0
  assert plan.audited.privacy.batch_size == 512
  assert _plan(directory, canaries=100, trial_id="next").source.startswith(
      "trial next")


@pytest.mark.parametrize("options, field", [
    ({"guesses": 1}, "--guesses"),
    ({"guesses": 101}, "--guesses"),
    ({"confidence": 1.0}, "--confidence"),
    ({"trial_id": "best"}, "--trial"),
    ({"base": "train"}, "canaries.base"),
])
def test_bad_options_name_their_field(options, field):
  with pytest.raises(ConfigError, match=field):
    _plan(canaries=100, **options)


def test_a_simulation_or_a_baseline_has_no_guarantee_to_audit(tmp_path):
  path = tmp_path / "sim.yaml"
  path.write_text(
      "dataset: {name: digits}\nmodel: {name: small-cnn}\n"
      "privacy: {batch_size: 64, noise_multiplier: 1.0, steps: 4,"
      " reference_batch_size: 512}\n")
  with pytest.raises(ConfigError, match="a private run to audit"):
    _plan(path, canaries=10)


def test_bounds_guess_half_in_and_half_out():
  plan = _plan(canaries=100, guesses=20)
  included = plan.config.canaries.included()
  perfect = {kind: kept.astype(float) for kind, kept in included.items()}
  found = audit_plan.bounds(plan, perfect)
  for bound in found.values():
    assert (bound.guesses, bound.correct, bound.canaries) == (20, 20, 100)
    assert bound.epsilon_lower_bound == bound.ceiling > 0
    assert bound.delta == plan.delta and bound.confidence == 0.95
