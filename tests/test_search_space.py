"""Tests of search spaces: files, checks, define-by-run, simulated trials."""

import copy
import dataclasses
import json
import math
import pathlib
from typing import Any

import optuna
import pytest
import yaml

from tan_tune.errors import ConfigError
from tan_tune.privacy import accounting
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.privacy.sampling_scheme import SamplingScheme
from tan_tune.search import hyperparameters
from tan_tune.search import resolved as resolved_lib
from tan_tune.search import space as search_space
from tan_tune.search import trials

SPACES = pathlib.Path(__file__).resolve().parent.parent / "search_spaces"
SHIPPED = ("digits-demo", "digits-private", "fashion-mnist-cnn",
           "fashion-mnist-frontier", "cifar10-wrn16-4", "imagenet-nfresnet50")
DIGITS_N = 1437
FASHION_MNIST_N = 60_000
CIFAR10_N = 50_000
IMAGENET_N = 1_281_167
_DELETE = object()

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _shipped(name: str) -> search_space.SearchSpace:
  return search_space.load_search_space(SPACES / f"{name}.yaml")


def _base() -> dict[str, Any]:
  """A valid space on digits that every malformed file starts from."""
  return {
      "name": "malformed",
      "dataset": {"name": "digits"},
      "model": {"name": "small-cnn"},
      "reference": {"batch_size": 512, "noise_multiplier": 2.0555,
                    "steps": 100, "target_epsilon": 8},
      "simulation_batch_sizes": [64, 128],
      "hyperparameters": {
          "lr": {"kind": "loguniform", "low": 0.5, "high": 8},
          "momentum": {"kind": "choice", "values": [0, 0.5]},
          "dampening": {"kind": "uniform", "low": 0, "high": 0.5},
          "ema_decay": {"kind": "choice", "values": [0.9, 0.99]},
          "augmentation": {"kind": "choice", "values": ["none", "crop-flip"]},
          "augmult": {"kind": "int", "low": 1, "high": 4},
      },
      "device": "cpu",
  }


def _write(tmp_path: pathlib.Path, data: dict[str, Any]) -> pathlib.Path:
  path = tmp_path / "space.yaml"
  path.write_text(yaml.safe_dump(data))
  return path


def _load(tmp_path: pathlib.Path, **changes: Any) -> search_space.SearchSpace:
  """Loads the base space with dotted paths (as keyword names) changed."""
  data = copy.deepcopy(_base())
  for dotted, value in changes.items():
    *parents, leaf = dotted.split("__")
    node = data
    for key in parents:
      node = node.setdefault(key, {})
    if value is _DELETE:
      del node[leaf]
    else:
      node[leaf] = value
  return search_space.load_search_space(_write(tmp_path, data))



def _run_config(space, params, dataset_size):
  """A trial's run, with the space resolved against N."""
  return trials.run_config(
      resolved_lib.resolve(space, dataset_size, "test-data"), params)

@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_files_load(name):
  space = _shipped(name)
  assert space.name == name
  assert "lr" in space.hyperparameters


@pytest.mark.parametrize("name, dataset_size, digits", [
    ("digits-demo", DIGITS_N, 4), ("fashion-mnist-cnn", FASHION_MNIST_N, 3)])
def test_shipped_sigma_is_the_rounded_up_calibration(name, dataset_size,
                                                     digits):
  """sigma_ref is the smallest sigma within budget, rounded up, so it is."""
  reference = _shipped(name).reference
  sigma = accounting.calibrate_sigma(
      dataset_size, reference.batch_size, reference.steps,
      reference.target_epsilon, reference.delta)
  scale = 10**digits
  assert reference.noise_multiplier == math.ceil(sigma * scale) / scale
  spent = triplet_lib.PrivacyTriplet(
      dataset_size, reference.batch_size, reference.noise_multiplier,
      reference.steps)
  delta = reference.delta or 1 / dataset_size
  assert accounting.epsilon(spent, delta).epsilon <= reference.target_epsilon


def test_base_space_is_valid(tmp_path):
  assert _load(tmp_path).hyperparameters["augmult"].kind == "int"


@pytest.mark.parametrize("changes, field", [
    ({"hyperparameters__lr__kind": "gaussian"}, "hyperparameters.lr.kind"),
    ({"hyperparameters__momentum__values": []},
     "hyperparameters.momentum.values"),
    ({"hyperparameters__momentum__low": 0}, "hyperparameters.momentum.low"),
    ({"hyperparameters__momentum__values": [0, [0.5]]},
     "hyperparameters.momentum.values[1]"),
    ({"hyperparameters__lr__low": 8}, "hyperparameters.lr.high"),
    ({"hyperparameters__lr__low": 0}, "hyperparameters.lr.low"),
    ({"hyperparameters__dampening__high": _DELETE},
     "hyperparameters.dampening.high"),
    ({"hyperparameters__augmult__high": 4.5}, "hyperparameters.augmult.high"),
    ({"hyperparameters__lr": {"kind": "uniform", "low": -1, "high": 1}},
     "hyperparameters.lr.low"),
    ({"hyperparameters__momentum__values": [0, 1.5]},
     "hyperparameters.momentum.values[1]"),
    ({"hyperparameters__dampening__high": 2}, "hyperparameters.dampening.high"),
    ({"hyperparameters__ema_decay__values": [1.0]},
     "hyperparameters.ema_decay.values[0]"),
    ({"hyperparameters__augmentation__values": ["none", "cutout"]},
     "hyperparameters.augmentation.values[1]"),
    ({"hyperparameters__augmentation": {"kind": "uniform", "low": 0,
                                        "high": 1}},
     "hyperparameters.augmentation.kind"),
    ({"hyperparameters__augmult": {"kind": "choice", "values": [0, 2]}},
     "hyperparameters.augmult.values[0]"),
    ({"hyperparameters__model": {"kind": "choice", "values": ["wrn-17-4"]}},
     "hyperparameters.model.values[0]"),
    ({"hyperparameters__learning_rate": {"kind": "choice", "values": [1]}},
     "hyperparameters.learning_rate"),
    ({"hyperparameters__lr": _DELETE}, "hyperparameters.lr"),
    ({"hyperparameters__momentum": _DELETE}, "hyperparameters.dampening"),
    ({"hyperparameters__augmentation__values": ["none"]},
     "hyperparameters.augmult"),
    ({"simulation_batch_sizes": [64, 1024]}, "simulation_batch_sizes[1]"),
    ({"simulation_batch_sizes": [0]}, "simulation_batch_sizes[0]"),
    ({"simulation_batch_sizes": []}, "simulation_batch_sizes"),
    ({"reference__noise_multiplier": 0}, "reference.noise_multiplier"),
    ({"reference__steps": 0}, "reference.steps"),
    ({"reference__delta": 1.5}, "reference.delta"),
    ({"reference__batch_size": 2048}, "reference.batch_size"),  # > N = 1437.
    ({"reference__target_epsilon": 7}, "reference.target_epsilon"),
    ({"metric": "train_loss"}, "metric"),
    ({"select_on": "train"}, "select_on"),
    ({"clipping": "ghost"}, "clipping"),
    ({"reference__sampling": "shuffle"}, "reference.sampling"),
    ({"reference__adjacency": "swap"}, "reference.adjacency"),
    ({"reference__sampling": "fixed-with-replacement",
      "reference__adjacency": "replace-one"}, "reference.adjacency"),
    ({"reference__sampling": "truncated-poisson",
      "reference__truncation_stds": -1}, "reference.truncation_stds"),
    # Fixed-size batches spend 2-3x more: the demo's sigma is over budget.
    ({"reference__sampling": "fixed"}, "reference.target_epsilon"),
    ({"validation_fraction": 0}, "validation_fraction"),
    ({"validation_fraction": 1}, "validation_fraction"),
    ({"reference__delta": 1e-3}, "reference.delta"),  # > 1/N = 6.96e-4.
    ({"metric": "augtest_accuracy"}, "metric"),  # 'none' is a choice.
    ({"mode": "maximize"}, "mode"),
    ({"scheduler": "hyperband"}, "scheduler"),
    ({"steps_grid": [100, 0]}, "steps_grid[1]"),
    ({"resources__gpu": -0.5}, "resources.gpu"),
    ({"resources__gpu": 1.5}, "resources.gpu"),
    ({"resources__cpu": 0}, "resources.cpu"),
    ({"resources__gpu_by_batch_size": {64: 1.5}},
     "resources.gpu_by_batch_size"),
    ({"resources__gpu_by_batch_size": {999: 0.5}},
     "resources.gpu_by_batch_size.999"),
    ({"num_trials": 0}, "num_trials"),
    ({"max_concurrent": 0}, "max_concurrent"),
    ({"eval_every": 0}, "eval_every"),
    ({"seed": -1}, "seed"),
    ({"name": "../escape"}, "name"),
    ({"device": "tpu"}, "device"),
    ({"device": "cuda"}, "device"),  # No GPU reserved.
    ({"device": "cuda", "resources__gpu_by_batch_size": {64: 0.5}},
     "device"),  # None for B = 128.
    ({"model__name": "not-a-model"}, "model.name"),
    ({"dataset__name": "svhn"}, "dataset.name"),
    ({"simulation_batch_size": [64]}, "simulation_batch_size"),  # Typo.
    ({"clipping": "jl"}, "jl_projections"),  # Needs r.
    ({"jl_projections": 10}, "jl_projections"),  # Without clipping 'jl'.
    ({"hyperparameters__jl_projections": {"kind": "choice", "values": [10]}},
     "hyperparameters.jl_projections"),
    ({"clipping": "jl", "jl_projections": 10,
      "hyperparameters__jl_projections": {"kind": "choice", "values": [10]}},
     "jl_projections"),  # One of the two.
    ({"clipping": "jl", "jl_projections": 0}, "jl_projections"),
    ({"clipping": "jl", "jl_projections": 32,
      "reference__sampling": "fixed"}, "reference.sampling"),
    # r = 4 has no finite eps: over any budget.
    ({"clipping": "jl", "hyperparameters__jl_projections":
      {"kind": "choice", "values": [32, 4]}}, "reference.target_epsilon"),
])
def test_malformed_files_are_rejected_naming_the_field(tmp_path, changes,
                                                        field):
  with pytest.raises(ConfigError) as info:
    # Resolved against N too, as `tan-tune search` does before writing.
    resolved_lib.resolve(_load(tmp_path, **changes), DIGITS_N, "test-data")
  assert info.value.field == field
  assert str(info.value).startswith(f"{field}: ")


def test_unknown_hyperparameter_error_lists_the_allowed_keys(tmp_path):
  with pytest.raises(ConfigError, match="lr, momentum, dampening, ema_decay,"
                     " augmentation, augmult, model"):
    _load(tmp_path, hyperparameters__weight_decay={"kind": "choice",
                                                   "values": [0]})


def test_folder_datasets_validate_without_their_data(tmp_path):
  space = _load(tmp_path, dataset={"name": "cifar10", "root": str(tmp_path)},
                reference__batch_size=4096, simulation_batch_sizes=[256])
  assert space.reference.batch_size == 4096


def _asked(space: search_space.SearchSpace, n: int = 60):
  """n trials drawn at random: their params and returned constants."""
  study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
  suggest = trials.define_by_run(space)
  draws = []
  for _ in range(n):
    trial = study.ask()
    constants = suggest(trial)
    draws.append((trial.params, constants))
  return draws


def test_dampening_is_searched_only_with_momentum():
  draws = _asked(_shipped("cifar10-wrn16-4"))
  assert {params["momentum"] > 0 for params, _ in draws} == {True, False}
  for params, _ in draws:
    assert ("dampening" in params) == (params["momentum"] > 0)


def test_augmult_is_searched_only_with_an_augmentation():
  draws = _asked(_shipped("cifar10-wrn16-4"))
  assert "none" in {params["augmentation"] for params, _ in draws}
  for params, _ in draws:
    assert ("augmult" in params) == (params["augmentation"] != "none")


def test_steps_only_with_a_steps_grid():
  for params, constants in _asked(_shipped("cifar10-wrn16-4"), 10):
    assert "steps" not in params and not constants
    assert params["simulation_batch_size"] in (256, 512)
  imagenet = _asked(_shipped("imagenet-nfresnet50"))
  assert {params["steps"] for params, _ in imagenet} == {
      18000, 72000, 288000}


def test_a_single_simulation_batch_size_is_a_constant():
  space = _shipped("digits-demo")
  trial = optuna.trial.FixedTrial({
      "lr": 1.0, "momentum": 0, "ema_decay": 0.9, "augmentation": "none"})
  assert trials.define_by_run(space)(trial) == {
      "simulation_batch_size": 64}
  assert set(trial.params) == {"lr", "momentum", "ema_decay", "augmentation"}


def test_fixed_trial_with_momentum_asks_for_dampening():
  space = _shipped("digits-demo")
  trial = optuna.trial.FixedTrial({
      "lr": 1.0, "momentum": 0.5, "dampening": 0.5, "ema_decay": 0.9,
      "augmentation": "none"})
  trials.define_by_run(space)(trial)
  assert trial.params["dampening"] == 0.5


def test_categorical_choices_are_plain_python_scalars():
  for params, _ in _asked(_shipped("imagenet-nfresnet50"), 20):
    for value in params.values():
      assert type(value) in (int, float, str)


def test_trial_at_a_constant_eta_choice_follows_table_3():
  space = _shipped("imagenet-nfresnet50")
  params = {"lr": 8, "momentum": 0, "ema_decay": 0.999,
            "augmentation": "crop-flip", "augmult": 8,
            "simulation_batch_size": 256, "steps": 18000}
  config, info = _run_config(space, params, IMAGENET_N)
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
  assert info["reference"] == {
      "batch_size": 32768, "noise_multiplier": 2.5, "steps": 18000}
  assert info["simulated"]["batch_size"] == 512
  assert info["lr_scale"] == 4
  assert info["compute_saving"] == 64
  assert info["eta"] == pytest.approx(reference.eta, rel=1e-4)
  json.dumps(info)


def test_more_steps_shrink_the_batch_and_the_learning_rate():
  space = _shipped("imagenet-nfresnet50")
  config, info = _run_config(
      space, {"lr": 8, "simulation_batch_size": 128, "steps": 288000},
      IMAGENET_N)
  assert (config.privacy.batch_size, config.privacy.steps) == (64, 288000)
  assert config.privacy.reference_batch_size == 8192
  assert config.optim.lr == 2
  assert info["lr_scale"] == 0.25


def test_simulated_trial_keeps_s_and_scales_sigma():
  space = _shipped("cifar10-wrn16-4")
  params = {"lr": 4, "momentum": 0.9, "dampening": 0.1, "ema_decay": 0.9999,
            "augmentation": "rrc", "augmult": 4, "simulation_batch_size": 256}
  config, info = _run_config(space, params, CIFAR10_N)
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
  assert info["compute_saving"] == 16 and info["lr_scale"] == 1
  assert info["eta_step"] == pytest.approx(
      triplet_lib.PrivacyTriplet(CIFAR10_N, 4096, 3, 2500).eta_step)


def test_absent_hyperparameters_keep_trial_defaults():
  space = _shipped("digits-demo")
  config, _ = _run_config(
      space, {"lr": 2.0, "momentum": 0, "ema_decay": 0.9,
              "augmentation": "none", "simulation_batch_size": 64},
      DIGITS_N)
  assert config.optim.dampening == 0
  assert config.augment.multiplicity == 1
  assert config.privacy.noise_multiplier == pytest.approx(
      space.reference.noise_multiplier * 64 / 512)
  assert config.clipping == "auto"


def test_the_clipping_method_reaches_every_trial():
  space = dataclasses.replace(_shipped("digits-demo"), clipping="vmap")
  config, _ = _run_config(
      space, {"lr": 2.0, "momentum": 0, "ema_decay": 0.9,
              "augmentation": "none", "simulation_batch_size": 64},
      DIGITS_N)
  assert config.clipping == "vmap"


def test_the_sampler_reaches_every_trial(tmp_path):
  space = _load(tmp_path, reference__sampling="truncated-poisson",
                reference__truncation_stds=3, reference__noise_multiplier=6)
  config, _ = _run_config(
      space, {"lr": 2.0, "simulation_batch_size": 64}, DIGITS_N)
  assert config.privacy.scheme == SamplingScheme("truncated-poisson",
                                                 truncation_stds=3)
  assert config.privacy.scheme.cap(64) == 88


def test_jl_projections_reach_every_trial_fixed_or_searched(tmp_path):
  # At the base's sigma, r = 16 would spend 8.25 > 8: r = 32 spends 7.75.
  fixed = _load(tmp_path, clipping="jl", jl_projections=32)
  config, _ = _run_config(
      fixed, {"lr": 2.0, "simulation_batch_size": 64}, DIGITS_N)
  assert (config.clipping, config.privacy.jl_projections) == ("jl", 32)
  assert config.privacy.scheme.accountants == ("pld-jl",)
  searched = _load(tmp_path, clipping="jl", hyperparameters__jl_projections={
      "kind": "choice", "values": [64, 32]})
  assert searched.projection_choices == (32, 64)
  assert [s.bound.projections for s in searched.reference_schemes()] == [32, 64]
  config, _ = _run_config(
      searched, {"lr": 2.0, "jl_projections": 64, "simulation_batch_size": 64},
      DIGITS_N)
  assert config.privacy.jl_projections == 64


def test_a_model_choice_replaces_only_the_name(tmp_path):
  space = _load(
      tmp_path, model={"name": "small-cnn", "num_groups": 4},
      hyperparameters__model={"kind": "choice", "values": ["wrn-10-1"]})
  config, _ = _run_config(
      space, {"lr": 1, "model": "wrn-10-1", "simulation_batch_size": 64},
      DIGITS_N)
  assert (config.model.name, config.model.num_groups) == ("wrn-10-1", 4)


def test_trial_config_rejects_unknown_params():
  with pytest.raises(ConfigError, match="params.learning_rate"):
    _run_config(
        _shipped("digits-demo"),
        {"learning_rate": 1, "simulation_batch_size": 64}, DIGITS_N)


def test_a_trials_gpu_share_may_depend_on_its_batch_size(tmp_path):
  from ray.tune import PlacementGroupFactory  # pylint: disable=g-import-not-at-top

  from tan_tune.search import callbacks  # pylint: disable=g-import-not-at-top

  space = _load(tmp_path, resources__gpu=0.5,
                resources__gpu_by_batch_size={64: 0.25})
  assert space.resources.gpu_for(64) == 0.25
  assert space.resources.gpu_for(128) == 0.5
  wanted = callbacks.TrialResources(space.resources)(
      {trials.SIMULATION_BATCH_SIZE: 64})
  assert wanted == PlacementGroupFactory([{"CPU": 1.0, "GPU": 0.25}])


def test_trials_select_on_validation_unless_test_is_asked_for(tmp_path):
  params = {"lr": 1.0, "simulation_batch_size": 64}
  space = _load(tmp_path)
  assert space.select_on == "validation"
  config, _ = _run_config(space, params, DIGITS_N)
  assert config.validation_fraction == search_space.DEFAULT_VALIDATION_FRACTION
  assert config.privacy.simulated and not config.privacy.claims_privacy
  fraction = _run_config(
      _load(tmp_path, validation_fraction=0.25), params, DIGITS_N)[0]
  assert fraction.validation_fraction == 0.25
  on_test = _run_config(_load(tmp_path, select_on="test"),
                                      params, DIGITS_N)[0]
  assert on_test.validation_fraction == 0


def test_a_trial_at_b_ref_is_still_a_simulation(tmp_path):
  config, _ = _run_config(
      _load(tmp_path, simulation_batch_sizes=[512]),
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


def test_a_width_is_searched_only_for_a_model_that_takes_one(tmp_path):
  width = {"kind": "choice", "values": [1.0, 2.0]}
  space = _load(tmp_path, hyperparameters__width=width)
  params = trials.central_params(space)
  config, _ = trials.run_config(resolved_lib.resolve(space, DIGITS_N, "d"),
                                {**params, "width": 2.0})
  assert config.model.width == 2.0
  with pytest.raises(ConfigError) as error:
    _load(tmp_path, hyperparameters__width=width,
          model__name="wrn-16-4")
  assert error.value.field == "hyperparameters.width"
  with pytest.raises(ConfigError) as error:
    _load(tmp_path, hyperparameters__width=width, hyperparameters__model={
        "kind": "choice", "values": ["wrn-16-4", "scatternet"]})
  assert error.value.field == "hyperparameters.width"


def test_a_choice_of_networks_draws_a_width_for_those_that_take_one(tmp_path):
  space = _load(tmp_path, hyperparameters__width={
      "kind": "choice", "values": [1.0, 2.0]}, hyperparameters__model={
          "kind": "choice", "values": ["small-cnn", "scatternet"]})
  drawn = [{**params, **constants} for params, constants in _asked(space, 12)]
  assert {params["model"] for params in drawn} == {"small-cnn", "scatternet"}
  for params in drawn:
    assert ("width" in params) == (params["model"] == "small-cnn")
    config, _ = trials.run_config(resolved_lib.resolve(space, DIGITS_N, "d"),
                                  params)
    assert config.model.width == params.get("width", 1.0)


def test_the_compute_budget_filters_the_steps_trials_draw(tmp_path):
  # B_ref = 512, S_ref = 100, augmult up to K = 4: S = 100 costs 204,800
  # example passes, S = 400 (B' = 256) 409,600.
  space = _load(tmp_path, steps_grid=[100, 400],
                compute_budget={"examples": 300_000})
  assert space.proposed_steps() == (100,)
  assert {params["steps"] for params, _ in _asked(space, 8)} == {100}
  with pytest.raises(ConfigError) as error:
    _load(tmp_path, steps_grid=[100, 400], compute_budget={"examples": 1000})
  assert error.value.field == "compute_budget.examples"


def test_a_trial_knows_the_compute_of_the_run_it_stands_for(tmp_path):
  space = _load(tmp_path, steps_grid=[100, 400])
  resolved = resolved_lib.resolve(space, DIGITS_N, "d")
  params = {**trials.central_params(space), "steps": 400,
            "augmentation": "crop-flip", "augmult": 2}
  _, info = trials.run_config(resolved, params)
  assert info["reference_examples"] == 256 * 400 * 2


def test_the_frontier_file_proposes_every_candidate_within_3x_and_eps_3():
  space = _shipped("fashion-mnist-frontier")
  today = 4096 * 600  # fashion-mnist-cnn's reference run.
  assert space.compute_budget.examples == 3 * today
  assert space.proposed_steps() == (600, 1200, 2400)
  resolved = resolved_lib.resolve(space, FASHION_MNIST_N, "fashion")
  networks = set()
  for params, _ in _asked(space, 20):
    params = {**params, "simulation_batch_size": 256}
    config, info = trials.run_config(resolved, params)
    assert info["reference_examples"] <= 3 * today
    networks.add((config.model.name, config.model.width))
    assert config.model.num_groups == 27  # The ScatterNet's GroupNorm.
  assert {name for name, _ in networks} == {"dp-cnn", "scatternet"}
  assert {width for name, width in networks if name == "dp-cnn"} <= {1, 1.5, 2}
  assert ("scatternet", 1.0) in networks
