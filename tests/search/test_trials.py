"""Tests of trials: define-by-run, conditions, the simulated run of each trial
and the compute of the run it stands for."""

import dataclasses
import json

import optuna
import pytest

from tan_tune.errors import ConfigError
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.privacy.sampling_scheme import SamplingScheme
from tan_tune.search import hyperparameters
from tan_tune.search import resolved as resolved_lib
from tan_tune.search import space as search_space
from tan_tune.search import trial_record
from tan_tune.search import trials

from space_files import (
    CIFAR10_N, DIGITS_N, FASHION_MNIST_N, IMAGENET_N, asked, load, run_config,
    shipped)


def test_dampening_is_searched_only_with_momentum():
  draws = asked(shipped("cifar10-wrn16-4"))
  assert {params["momentum"] > 0 for params, _ in draws} == {True, False}
  for params, _ in draws:
    assert ("dampening" in params) == (params["momentum"] > 0)


def test_augmult_is_searched_only_with_an_augmentation():
  draws = asked(shipped("cifar10-wrn16-4"))
  assert "none" in {params["augmentation"] for params, _ in draws}
  for params, _ in draws:
    assert ("augmult" in params) == (params["augmentation"] != "none")


def test_steps_only_with_a_steps_grid():
  for params, constants in asked(shipped("cifar10-wrn16-4"), 10):
    assert "steps" not in params and not constants
    assert params["simulation_batch_size"] in (256, 512)
  imagenet = asked(shipped("imagenet-nfresnet50"))
  assert {params["steps"] for params, _ in imagenet} == {
      18000, 72000, 288000}


def test_a_single_simulation_batch_size_is_a_constant():
  space = shipped("digits-demo")
  trial = optuna.trial.FixedTrial({
      "lr": 1.0, "momentum": 0, "ema_decay": 0.9, "augmentation": "none"})
  assert trials.define_by_run(space)(trial) == {
      "simulation_batch_size": 64}
  assert set(trial.params) == {"lr", "momentum", "ema_decay", "augmentation"}


def test_fixed_trial_with_momentum_asks_for_dampening():
  space = shipped("digits-demo")
  trial = optuna.trial.FixedTrial({
      "lr": 1.0, "momentum": 0.5, "dampening": 0.5, "ema_decay": 0.9,
      "augmentation": "none"})
  trials.define_by_run(space)(trial)
  assert trial.params["dampening"] == 0.5


def test_categorical_choices_are_plain_python_scalars():
  for params, _ in asked(shipped("imagenet-nfresnet50"), 20):
    for value in params.values():
      assert type(value) in (int, float, str)


def test_trial_at_a_constant_eta_choice_follows_table_3():
  space = shipped("imagenet-nfresnet50")
  params = {"lr": 8, "momentum": 0, "ema_decay": 0.999,
            "augmentation": "crop-flip", "augmult": 8,
            "simulation_batch_size": 256, "steps": 18000}
  config, record = run_config(space, params, IMAGENET_N)
  # Table 3: S = 18K runs at B = 512 (= 32768 / 64) with lr 32 = 8 x 72K / 18K.
  reference = triplet_lib.PrivacyTriplet(IMAGENET_N, 16384, 2.5, 72000)
  alternative = triplet_lib.constant_eta_triplets(reference, [18000])[0]
  expected = triplet_lib.simulate_alternative(
      alternative, reference, triplet_lib.simulate(reference, 256)).triplet
  privacy = config.privacy
  assert (privacy.batch_size, privacy.steps) == (512, 18000)
  assert privacy.batch_size == expected.batch_size
  assert privacy.noise_multiplier == pytest.approx(2.5 * 512 / 32768)
  assert privacy.noise_multiplier == expected.noise_multiplier
  assert privacy.reference_batch_size == 32768
  assert config.optim.lr == 32
  assert (config.augment.family, config.augment.multiplicity) == (
      "crop-flip", 8)
  assert record.reference == triplet_lib.PrivacyTriplet(
      IMAGENET_N, 32768, 2.5, 18000)
  assert record.simulated.batch_size == 512
  assert record.lr_scale == 4
  assert record.compute_saving == 64
  assert record.reference.eta == pytest.approx(reference.eta, rel=1e-4)
  json.dumps(record.as_params())


def test_more_steps_shrink_the_batch_and_the_learning_rate():
  space = shipped("imagenet-nfresnet50")
  config, record = run_config(
      space, {"lr": 8, "simulation_batch_size": 128, "steps": 288000},
      IMAGENET_N)
  assert (config.privacy.batch_size, config.privacy.steps) == (64, 288000)
  assert config.privacy.reference_batch_size == 8192
  assert config.optim.lr == 2
  assert record.lr_scale == 0.25


def test_simulated_trial_keeps_s_and_scales_sigma():
  space = shipped("cifar10-wrn16-4")
  params = {"lr": 4, "momentum": 0.9, "dampening": 0.1, "ema_decay": 0.9999,
            "augmentation": "rrc", "augmult": 4, "simulation_batch_size": 256}
  config, record = run_config(space, params, CIFAR10_N)
  privacy = config.privacy
  assert privacy.batch_size == 256
  assert privacy.noise_multiplier == pytest.approx(3 * 256 / 4096)
  assert privacy.steps == 2500
  assert privacy.reference_batch_size == 4096
  assert privacy.clip_norm == space.reference.clip_norm
  assert privacy.delta is None
  assert (config.optim.lr, config.optim.momentum, config.optim.dampening,
          config.optim.ema_decay) == (4, 0.9, 0.1, 0.9999)
  assert config.model == space.model
  assert (config.eval_every, config.max_physical_batch, config.seed,
          config.device) == (250, 64, 0, "cuda")
  assert record.compute_saving == 16 and record.lr_scale == 1
  assert record.reference.eta_step == pytest.approx(
      triplet_lib.PrivacyTriplet(CIFAR10_N, 4096, 3, 2500).eta_step)


def test_absent_hyperparameters_keep_trial_defaults():
  space = shipped("digits-demo")
  config, _ = run_config(
      space, {"lr": 2.0, "momentum": 0, "ema_decay": 0.9,
              "augmentation": "none", "simulation_batch_size": 64},
      DIGITS_N)
  assert config.optim.dampening == 0
  assert config.augment.multiplicity == 1
  assert config.privacy.noise_multiplier == pytest.approx(
      space.reference.noise_multiplier * 64 / 512)
  assert config.clipping == "auto"


def test_the_clipping_method_reaches_every_trial():
  space = dataclasses.replace(shipped("digits-demo"), clipping="vmap")
  config, _ = run_config(
      space, {"lr": 2.0, "momentum": 0, "ema_decay": 0.9,
              "augmentation": "none", "simulation_batch_size": 64},
      DIGITS_N)
  assert config.clipping == "vmap"


def test_the_sampler_reaches_every_trial(tmp_path):
  space = load(tmp_path, reference__sampling="truncated-poisson",
                reference__truncation_stds=3, reference__noise_multiplier=6)
  config, _ = run_config(
      space, {"lr": 2.0, "simulation_batch_size": 64}, DIGITS_N)
  assert config.privacy.scheme == SamplingScheme("truncated-poisson",
                                                 truncation_stds=3)
  assert config.privacy.scheme.cap(64) == 88


def test_jl_projections_reach_every_trial_fixed_or_searched(tmp_path):
  # At the base's sigma, r = 16 would spend 8.25 > 8: r = 32 spends 7.75.
  fixed = load(tmp_path, clipping="jl", jl_projections=32)
  config, _ = run_config(
      fixed, {"lr": 2.0, "simulation_batch_size": 64}, DIGITS_N)
  assert (config.clipping, config.privacy.jl_projections) == ("jl", 32)
  assert config.privacy.scheme.accountants == ("pld-jl",)
  searched = load(tmp_path, clipping="jl", hyperparameters__jl_projections={
      "kind": "choice", "values": [64, 32]})
  assert searched.projection_choices == (32, 64)
  assert [s.bound.projections for s in searched.reference_schemes()] == [32, 64]
  config, _ = run_config(
      searched, {"lr": 2.0, "jl_projections": 64, "simulation_batch_size": 64},
      DIGITS_N)
  assert config.privacy.jl_projections == 64


def test_a_model_choice_replaces_only_the_name(tmp_path):
  space = load(
      tmp_path, model={"name": "small-cnn", "num_groups": 4},
      hyperparameters__model={"kind": "choice", "values": ["wrn-10-1"]})
  config, _ = run_config(
      space, {"lr": 1, "model": "wrn-10-1", "simulation_batch_size": 64},
      DIGITS_N)
  assert (config.model.name, config.model.num_groups) == ("wrn-10-1", 4)


def test_trial_config_rejects_unknown_params():
  with pytest.raises(ConfigError, match="params.learning_rate"):
    run_config(
        shipped("digits-demo"),
        {"learning_rate": 1, "simulation_batch_size": 64}, DIGITS_N)


def test_a_trials_gpu_share_may_depend_on_its_batch_size(tmp_path):
  from ray.tune import PlacementGroupFactory  # pylint: disable=g-import-not-at-top

  from tan_tune.search import callbacks  # pylint: disable=g-import-not-at-top

  space = load(tmp_path, resources__gpu=0.5,
                resources__gpu_by_batch_size={64: 0.25})
  assert space.resources.gpu_for(64) == 0.25
  assert space.resources.gpu_for(128) == 0.5
  wanted = callbacks.TrialResources(space.resources)(
      {trials.SIMULATION_BATCH_SIZE: 64})
  assert wanted == PlacementGroupFactory([{"CPU": 1.0, "GPU": 0.25}])


def test_trials_select_on_validation_unless_test_is_asked_for(tmp_path):
  params = {"lr": 1.0, "simulation_batch_size": 64}
  space = load(tmp_path)
  assert space.select_on == "validation"
  config, _ = run_config(space, params, DIGITS_N)
  assert config.validation_fraction == search_space.DEFAULT_VALIDATION_FRACTION
  assert config.privacy.simulated and not config.privacy.claims_privacy
  fraction = run_config(
      load(tmp_path, validation_fraction=0.25), params, DIGITS_N)[0]
  assert fraction.validation_fraction == 0.25
  on_test = run_config(load(tmp_path, select_on="test"),
                                      params, DIGITS_N)[0]
  assert on_test.validation_fraction == 0


def test_a_trial_at_b_ref_is_still_a_simulation(tmp_path):
  config, _ = run_config(
      load(tmp_path, simulation_batch_sizes=[512]),
      {"lr": 1.0, "simulation_batch_size": 512}, DIGITS_N)
  assert config.privacy.batch_size == config.privacy.reference_batch_size
  assert config.privacy.simulated and not config.privacy.claims_privacy


@pytest.mark.parametrize("spec, center", [
    ({"kind": "choice", "values": [0.9, 0.5]}, 0.9),
    ({"kind": "uniform", "low": 0.2, "high": 0.6}, 0.4),
    ({"kind": "loguniform", "low": 0.1, "high": 10}, 1.0),
    ({"kind": "int", "low": 1, "high": 4}, 2),
])
def test_a_distribution_is_stood_for_by_its_centre(spec, center):
  assert hyperparameters.Distribution(**spec).center() == pytest.approx(
      center)


def test_the_central_trial_skips_what_its_conditions_disable():
  space = search_space.load_search_space("search_spaces/digits-demo.yaml")
  params = trials.central_params(space)
  # momentum's first choice is 0: dampening is not searched then.
  assert params == {"lr": pytest.approx((0.1 * 8) ** 0.5), "momentum": 0,
                    "ema_decay": 0.8, "augmentation": "none",
                    "simulation_batch_size": 64}


@pytest.mark.parametrize("key, value", [("width", 2.0), ("num_groups", 81)])
def test_a_searched_model_field_reaches_the_model(tmp_path, key, value):
  space = load(tmp_path, **{f"hyperparameters__{key}": {
      "kind": "choice", "values": [1, value]}})
  params = trials.central_params(space)
  config, _ = run_config(space, {**params, key: value}, DIGITS_N)
  assert getattr(config.model, key) == value


def test_a_choice_of_networks_draws_a_width_for_those_that_take_one(tmp_path):
  space = load(tmp_path, hyperparameters__width={
      "kind": "choice", "values": [1.0, 2.0]}, hyperparameters__model={
          "kind": "choice", "values": ["small-cnn", "scatternet"]})
  drawn = [{**params, **constants} for params, constants in asked(space, 12)]
  assert {params["model"] for params in drawn} == {"small-cnn", "scatternet"}
  for params in drawn:
    assert ("width" in params) == (params["model"] == "small-cnn")
    config, _ = run_config(space, params, DIGITS_N)
    assert config.model.width == params.get("width", 1.0)


def test_the_compute_budget_filters_the_steps_trials_draw(tmp_path):
  # B_ref = 512, S_ref = 100, augmult up to K = 4: S = 100 costs 204,800
  # example passes, S = 400 (B' = 256) 409,600.
  space = load(tmp_path, steps_grid=[100, 400],
                compute_budget={"examples": 300_000})
  assert space.proposed_steps() == (100,)
  assert {params["steps"] for params, _ in asked(space, 8)} == {100}
  with pytest.raises(ConfigError) as error:
    load(tmp_path, steps_grid=[100, 400], compute_budget={"examples": 1000})
  assert error.value.field == "compute_budget.examples"


def test_a_trial_knows_the_compute_of_the_run_it_stands_for(tmp_path):
  space = load(tmp_path, steps_grid=[100, 400])
  params = {**trials.central_params(space), "steps": 400,
            "augmentation": "crop-flip", "augmult": 2}
  _, record = run_config(space, params, DIGITS_N)
  assert record.reference_examples == 256 * 400 * 2


@pytest.mark.parametrize("name, steps", [
    ("fashion-mnist-frontier", (600, 1200, 2400)),
    ("mnist-eps3", (600, 1200, 2400)),
    # At B_ref = 8192, S' = 2400 (B' = 4096) would pass the budget.
    ("fashion-mnist-eps3", (600, 1200)), ("fashion-mnist-eps2", (600, 1200)),
    ("fashion-mnist-eps1", (600, 1200, 2400))])
def test_the_frontier_files_propose_every_candidate_within_3x_and_their_eps(
    name, steps):
  """At eps 3, 2 and 1, and MNIST's (the same N): resolving checks every S'
  against the budget."""
  space = shipped(name)
  today = 4096 * 600  # fashion-mnist-cnn's reference run.
  assert space.compute_budget.examples == 3 * today
  assert space.proposed_steps() == steps
  resolved = resolved_lib.resolve(space, FASHION_MNIST_N)
  networks = set()
  for params, _ in asked(space, 20):
    params = {**params, "simulation_batch_size": 256}
    record = trial_record.build(resolved, params)
    config = record.config
    assert record.reference_examples <= 3 * today
    networks.add((config.model.name, config.model.width))
    assert config.model.num_groups == 27  # The ScatterNet's GroupNorm.
  assert {name for name, _ in networks} == {"dp-cnn", "scatternet"}
  assert {width for name, width in networks if name == "dp-cnn"} <= {1, 1.5, 2}
  assert ("scatternet", 1.0) in networks
