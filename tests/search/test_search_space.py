"""Tests of search files: loading, and checks that name the field at fault."""

import math

import pytest

from tan_tune.errors import ConfigError
from tan_tune.privacy import accounting
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.search import resolved as resolved_lib

from space_files import (
    SHIPPED, DIGITS_N, FASHION_MNIST_N, DELETE, shipped, load)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_filesload(name):
  space = shipped(name)
  assert space.name == name
  assert "lr" in space.hyperparameters


@pytest.mark.parametrize("name, dataset_size, digits", [
    ("digits-demo", DIGITS_N, 4), ("fashion-mnist-cnn", FASHION_MNIST_N, 3),
    ("fashion-mnist-eps3", FASHION_MNIST_N, 3),
    ("fashion-mnist-eps2", FASHION_MNIST_N, 4),
    ("fashion-mnist-eps1", FASHION_MNIST_N, 4)])
def test_shipped_sigma_is_the_rounded_up_calibration(name, dataset_size,
                                                     digits):
  """sigma_ref is the smallest sigma within budget, rounded up, so it is."""
  reference = shipped(name).reference
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
  assert load(tmp_path).hyperparameters["augmult"].kind == "int"


@pytest.mark.parametrize("changes, field", [
    ({"hyperparameters__lr__kind": "gaussian"}, "hyperparameters.lr.kind"),
    ({"hyperparameters__momentum__values": []},
     "hyperparameters.momentum.values"),
    ({"hyperparameters__momentum__low": 0}, "hyperparameters.momentum.low"),
    ({"hyperparameters__momentum__values": [0, [0.5]]},
     "hyperparameters.momentum.values[1]"),
    ({"hyperparameters__lr__low": 8}, "hyperparameters.lr.high"),
    ({"hyperparameters__lr__low": 0}, "hyperparameters.lr.low"),
    ({"hyperparameters__dampening__high": DELETE},
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
    ({"hyperparameters__lr": DELETE}, "hyperparameters.lr"),
    ({"hyperparameters__momentum": DELETE}, "hyperparameters.dampening"),
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
    resolved_lib.resolve(load(tmp_path, **changes), DIGITS_N)
  assert info.value.field == field
  assert str(info.value).startswith(f"{field}: ")


def test_unknown_hyperparameter_error_lists_the_allowed_keys(tmp_path):
  with pytest.raises(ConfigError, match="lr, momentum, dampening, ema_decay,"
                     " augmentation, augmult, model"):
    load(tmp_path, hyperparameters__weight_decay={"kind": "choice",
                                                   "values": [0]})


def test_folder_datasets_validate_without_their_data(tmp_path):
  space = load(tmp_path, dataset={"name": "cifar10", "root": str(tmp_path)},
                reference__batch_size=4096, simulation_batch_sizes=[256])
  assert space.reference.batch_size == 4096


def test_a_searched_width_needs_a_model_that_takes_one(tmp_path):
  width = {"kind": "choice", "values": [1.0, 2.0]}
  with pytest.raises(ConfigError) as error:
    load(tmp_path, hyperparameters__width=width, model__name="wrn-16-4")
  assert error.value.field == "hyperparameters.width"
  with pytest.raises(ConfigError) as error:
    load(tmp_path, hyperparameters__width=width, hyperparameters__model={
        "kind": "choice", "values": ["wrn-16-4", "scatternet"]})
  assert error.value.field == "hyperparameters.width"


def test_searched_scales_need_a_scatternet_and_multiply_its_networks(
    tmp_path):
  """Each ScatterNet at each J is a front end of its own, whose features a
  search computes once."""
  scales = {"kind": "choice", "values": [2, 3]}
  with pytest.raises(ConfigError) as error:
    load(tmp_path, hyperparameters__scales=scales, model__name="dp-cnn")
  assert error.value.field == "hyperparameters.scales"
  space = load(tmp_path, hyperparameters__scales=scales,
               hyperparameters__model={"kind": "choice", "values": [
                   "dp-cnn", "scatternet", "scatternet-cnn"]})
  assert [(model.name, model.scales) for model in space.networks()] == [
      ("dp-cnn", 2), ("scatternet", 2), ("scatternet", 3),
      ("scatternet-cnn", 2), ("scatternet-cnn", 3)]


def test_a_fixed_width_needs_every_searched_model_to_take_one(tmp_path):
  """Every trial keeps the file's model fields but the name: a ScatterNet
  trial could not keep width 2."""
  networks = {"kind": "choice", "values": ["small-cnn", "scatternet"]}
  with pytest.raises(ConfigError) as error:
    load(tmp_path, model__width=2.0, hyperparameters__model=networks)
  assert error.value.field == "model.width"
  assert "'scatternet'" in error.value.allowed
  load(tmp_path, model__width=2.0, hyperparameters__model={
      "kind": "choice", "values": ["small-cnn", "dp-cnn"]})
  # Nor could a CNN trial keep a ScatterNet's scales.
  with pytest.raises(ConfigError) as error:
    load(tmp_path, model__name="scatternet", model__scales=3,
         hyperparameters__model=networks)
  assert error.value.field == "model.scales"
  assert "'small-cnn'" in error.value.allowed

