"""Tests of plug-in references: a team's own model factory and weights."""

import dataclasses
import hashlib
import pathlib
import sys

import pytest
import torch
import yaml

from tan_tune import config_io
from tan_tune.cli import main as cli
from tan_tune.errors import ConfigError
from tan_tune.promote import plan as promotion
from tan_tune.promote import search_outcome
from tan_tune.search import driver as search_driver
from tan_tune.search import space as search_space
from tan_tune.training import datasets
from tan_tune.training import models
from tan_tune.training import plugins
from tan_tune.training import trial
from tan_tune.training import trial_config
import mlflow_stores

DIGITS = ((1, 8, 8), 10)
DEMO = pathlib.Path(__file__).resolve().parents[2] / "search_spaces" / "digits-demo.yaml"


def _factory(name, **kwargs):
  return models.ModelConfig(factory=f"plugin_factories:{name}", kwargs=kwargs)


def test_a_reference_resolves_to_its_callable():
  import plugin_factories  # pylint: disable=import-outside-toplevel
  assert plugins.resolve("model.factory", "plugin_factories:digits_mlp") is (
      plugin_factories.digits_mlp)
  assert plugins.resolve("f", "collections:OrderedDict.fromkeys")


@pytest.mark.parametrize("reference, allowed", [
    ("plugin_factories.digits_mlp", "of the form"),
    ("a:b:c", "of the form"),
    (":digits_mlp", "of the form"),
    (3, "of the form"),
    ("no_such_package_here:build", "an importable module"),
    ("plugin_factories:no_such_factory", "it has no 'no_such_factory'"),
    ("plugin_factories:NOT_CALLABLE", "a callable; it is a int"),
])
def test_bad_references_name_the_field_and_what_is_allowed(reference,
                                                          allowed):
  with pytest.raises(ConfigError) as error:
    plugins.resolve("model.factory", reference)
  assert error.value.field == "model.factory"
  assert allowed in error.value.allowed


def test_a_trial_config_names_a_factory_and_trains_it_with_dp_sgd():
  config = config_io.from_dict(trial_config.TrialConfig, {
      "dataset": {"name": "digits"},
      "model": {"factory": "plugin_factories:digits_mlp",
                "kwargs": {"hidden": 16}},
      "privacy": {"batch_size": 64, "noise_multiplier": 1.0, "steps": 4},
      "eval_every": 4, "device": "cpu"})
  assert config.model == _factory("digits_mlp", hidden=16)
  result = trial.run_trial(config)
  assert result.metrics["step"] == 4
  assert 0 <= result.metrics["accuracy"] <= 1
  # Written back out, the reference and its kwargs travel as plain data.
  assert config_io.to_dict(config)["model"]["factory"] == (
      "plugin_factories:digits_mlp")


def test_the_factory_gets_its_kwargs():
  model = models.build_model(_factory("digits_mlp", hidden=7), *DIGITS)
  assert model[1].out_features == 7


@pytest.mark.parametrize("name, kwargs, allowed", [
    ("with_batch_norm", {}, "nn.GroupNorm"),
    ("digits_mlp", {"num_classes": 3}, "[batch, 10] logits"),
    ("digits_mlp", {"width": 3}, "it raised TypeError"),
    ("broken", {"depth": 2}, "no layer for depth 2"),
    ("not_a_model", {}, "returning a torch.nn.Module; it returned a str"),
])
def test_a_model_the_run_cannot_train_is_refused_with_the_reason(
    name, kwargs, allowed):
  with pytest.raises(ConfigError) as error:
    models.build_model(_factory(name, **kwargs), *DIGITS)
  assert error.value.field == "model.factory"
  assert allowed in error.value.allowed


def test_inputs_of_another_shape_are_refused_before_training():
  with pytest.raises(ConfigError) as error:
    models.build_model(_factory("digits_mlp"), (3, 32, 32), 10)
  assert "inputs of shape [batch, 3, 32, 32]" in error.value.allowed


@pytest.mark.parametrize("fields, field", [
    ({"name": "small-cnn", "factory": "plugin_factories:digits_mlp"},
     "model"),
    ({}, "model"),
    ({"name": "small-cnn", "kwargs": {"hidden": 3}}, "model.kwargs"),
    ({"factory": "plugin_factories"}, "model.factory"),
    ({"factory": "plugin_factories:digits_mlp", "weights": 3},
     "model.weights"),
])
def test_a_model_config_names_exactly_one_model(fields, field):
  with pytest.raises(ConfigError) as error:
    models.ModelConfig(**fields)
  assert error.value.field == field


def test_pretrained_weights_load_and_are_named_by_their_digest(tmp_path):
  trained = models.build_model(_factory("digits_mlp"), *DIGITS)
  path = tmp_path / "trunk.pt"
  torch.save(trained.state_dict(), path)
  config = models.ModelConfig(factory="plugin_factories:digits_mlp",
                              weights=str(path))
  model = models.build_model(config, *DIGITS)
  for name, value in trained.state_dict().items():
    assert torch.equal(model.state_dict()[name], value), name
  assert plugins.file_digest("model.weights", str(path)) == hashlib.sha256(
      path.read_bytes()).hexdigest()


def test_weights_of_another_model_or_no_file_are_refused(tmp_path):
  path = tmp_path / "other.pt"
  torch.save(models.build_model(_factory("digits_mlp", hidden=5),
                                *DIGITS).state_dict(), path)
  for weights, allowed in ((path, "the state dict of this model"),
                           (tmp_path / "gone.pt", "a readable local file")):
    with pytest.raises(ConfigError) as error:
      models.build_model(models.ModelConfig(
          factory="plugin_factories:digits_mlp", weights=str(weights)),
          *DIGITS)
    assert error.value.field == "model.weights"
    assert allowed in error.value.allowed
  with pytest.raises(ConfigError) as error:
    plugins.file_digest("model.weights", str(tmp_path / "gone.pt"))
  assert error.value.field == "model.weights"


_RECORDS = {"factory": "plugin_factories:tabular_tensors"}
_MLP = {"factory": "plugin_factories:tabular_mlp"}


@pytest.mark.parametrize("changes, field, allowed", [
    ({"model": {"factory": "plugin_factories:with_batch_norm"}},
     "model.factory", "nn.GroupNorm"),
    ({"dataset": {"factory": "plugin_factories:one_label_out_of_range"},
      "model": _MLP}, "dataset.factory", "one is outside"),
    ({"dataset": _RECORDS, "model": _MLP, "augmentation": "crop-flip"},
     "augment.family", "augmentations act on images"),
    ({"dataset": _RECORDS}, "model.name", "built-in models take images"),
])
def test_a_search_refuses_what_it_cannot_train_before_any_trial(
    tmp_path, capsys, changes, field, allowed):
  space = yaml.safe_load(DEMO.read_text())
  space["hyperparameters"]["augmentation"]["values"] = [
      changes.pop("augmentation", "none")]
  space.update(changes)
  space["reference"].update(batch_size=64, noise_multiplier=2.0)
  path = tmp_path / "space.yaml"
  path.write_text(yaml.safe_dump(space))
  storage = tmp_path / "runs"
  with pytest.raises(SystemExit) as exit_:
    cli.main(["search", str(path), "--storage", str(storage),
              "--tracking-uri", mlflow_stores.store(tmp_path)])
  assert exit_.value.code == 2
  err = capsys.readouterr().err
  assert field in err and allowed in err
  assert len(err.strip().splitlines()) == 1
  assert not (storage / space["name"]).exists()


def test_the_plan_names_the_starting_weights_by_their_digest(searches,
                                                             tmp_path):
  path = tmp_path / "trunk.pt"
  torch.save(models.build_model(_factory("digits_mlp"), *DIGITS).state_dict(),
             path)
  directory = searches.write(tmp_path, space_fields={"model": {
      "factory": "plugin_factories:digits_mlp", "weights": str(path)}})
  plan = promotion.plan_promotion(
      search_outcome.load_search_directory(directory))
  assert plan.config.model.weights == str(path)
  assert plan.as_dict()["model_weights_sha256"] == hashlib.sha256(
      path.read_bytes()).hexdigest()


def test_a_layer_fast_clipping_does_not_cover_is_said_once_or_refused(
    capsys):
  space = search_space.load_search_space(DEMO)
  data = datasets.load_dataset(space.dataset)
  own = dataclasses.replace(
      space, model=models.ModelConfig(factory="plugin_factories:scaled_mlp"))
  search_driver._check_own_model(own, data)
  err = capsys.readouterr().err
  assert ("plugin_factories:scaled_mlp: fast clipping does not cover 1.weight;"
          " trials clip per-example gradients (vmap) instead") in err
  with pytest.raises(ConfigError) as error:
    search_driver._check_own_model(dataclasses.replace(own, clipping="fast"),
                                   data)
  assert error.value.field == "clipping" and "1.weight" in error.value.allowed
  # A model fast clipping covers: nothing to say.
  search_driver._check_own_model(dataclasses.replace(
      own, model=_factory("digits_mlp")), data)
  assert capsys.readouterr().err == ""


def test_a_module_in_the_commands_folder_resolves(tmp_path, monkeypatch):
  """As `tan-tune` runs (a console script, whose sys.path does not hold the
  folder it runs from) and as Ray's local workers import."""
  (tmp_path / "folder_models.py").write_text("def build():\n  return 1\n")
  monkeypatch.chdir(tmp_path)
  monkeypatch.setattr(sys, "path", [p for p in sys.path
                                    if p not in ("", str(tmp_path))])
  assert plugins.resolve("model.factory", "folder_models:build")() == 1
  assert sys.path[-1] == str(tmp_path)  # After everything installed.
