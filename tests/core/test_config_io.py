"""Tests for tan_tune.config_io: YAML loading, typed building, round trips."""

import dataclasses
import math
from typing import Any, Literal, Optional

import pytest
import yaml

from tan_tune import config_io
from tan_tune.errors import ConfigError
from tan_tune.training import augment
from tan_tune.training import models


@dataclasses.dataclass(frozen=True)
class Privacy:
  batch_size: int
  noise_multiplier: float = 1.0
  clip_norm: float | None = None

  def __post_init__(self) -> None:
    if self.batch_size < 1:
      raise ConfigError("batch_size", self.batch_size, "an integer >= 1")
    if self.noise_multiplier < 0:
      # Already a full path: must not be prefixed again.
      raise ConfigError(
          "privacy.noise_multiplier", self.noise_multiplier, ">= 0")


@dataclasses.dataclass(frozen=True)
class Experiment:
  name: str
  privacy: Privacy
  optimizer: Literal["sgd", "adam"] = "sgd"
  augment: bool = False
  learning_rates: tuple[float, ...] = (0.1,)
  tags: tuple[str, ...] = ()
  image_shape: tuple[int, int, int] = (3, 32, 32)
  seed: Optional[int] = None
  extra: dict[str, Any] = dataclasses.field(default_factory=dict)
  note: Any = None


@dataclasses.dataclass(frozen=True)
class Deferred:
  # String annotations, as under `from __future__ import annotations`.
  privacy: "Privacy"
  steps: "int | None" = None


def _experiment_data() -> dict[str, Any]:
  return {
      "name": "cifar",
      "privacy": {"batch_size": 256, "noise_multiplier": 3, "clip_norm": 1.0},
      "optimizer": "adam",
      "augment": True,
      "learning_rates": [0.5, 1, 2.0],
      "tags": ["a", "b"],
      "image_shape": [1, 8, 8],
      "seed": 7,
      "extra": {"anything": [1, {"x": None}]},
      "note": [1, "two"],
  }


def _error(cls: type[Any], data: Any) -> ConfigError:
  with pytest.raises(ConfigError) as info:
    config_io.from_dict(cls, data)
  return info.value


def test_builds_nested_dataclasses_with_types():
  config = config_io.from_dict(Experiment, _experiment_data())
  assert config.privacy == Privacy(256, 3.0, 1.0)
  assert isinstance(config.privacy.noise_multiplier, float)
  assert config.learning_rates == (0.5, 1.0, 2.0)
  assert config.tags == ("a", "b")
  assert config.image_shape == (1, 8, 8)
  assert config.extra == {"anything": [1, {"x": None}]}
  assert config.note == [1, "two"]


def test_defaults_fill_missing_optional_fields():
  config = config_io.from_dict(
      Experiment, {"name": "x", "privacy": {"batch_size": 1}})
  assert config == Experiment("x", Privacy(1))


def test_lists_become_tuples_so_frozen_configs_stay_hashable():
  config = config_io.from_dict(Experiment, _experiment_data())
  assert isinstance(config.learning_rates, tuple)
  assert isinstance(config.image_shape, tuple)
  hash((config.privacy, config.learning_rates, config.tags))


def test_resolves_string_annotations():
  config = config_io.from_dict(
      Deferred, {"privacy": {"batch_size": 2}, "steps": 1e3})
  assert config == Deferred(Privacy(2), 1000)


def test_integral_float_is_an_int():
  config = config_io.from_dict(Privacy, {"batch_size": 1e3})
  assert config.batch_size == 1000
  assert type(config.batch_size) is int


@pytest.mark.parametrize("value", [2.5, True, "256", None, math.inf])
def test_int_rejects_non_integers(value):
  error = _error(Experiment, {"name": "x", "privacy": {"batch_size": value}})
  assert error.field == "privacy.batch_size"
  assert error.value is value
  assert "integer" in error.allowed


@pytest.mark.parametrize("value,counts", [
    (1, True), (7, True), (0, False), (-1, False), (True, False),
    (2.0, False), ("3", False), (None, False)])
def test_a_count_is_an_integer_of_at_least_one_and_never_a_bool(value,
                                                                 counts):
  assert config_io.is_count(value) is counts


@pytest.mark.parametrize("value", [True, "0.1", math.nan, -math.inf])
def test_float_rejects_bools_strings_and_non_finite(value):
  error = _error(Privacy, {"batch_size": 1, "noise_multiplier": value})
  assert error.field == "noise_multiplier"
  assert error.allowed == "must be a finite number"


@pytest.mark.parametrize("value", [1, "true", "yes"])
def test_bool_is_only_true_or_false(value):
  error = _error(Experiment, {
      "name": "x", "privacy": {"batch_size": 1}, "augment": value})
  assert (error.field, error.allowed) == ("augment", "must be true or false")


def test_str_rejects_numbers():
  error = _error(Experiment, {"name": 3, "privacy": {"batch_size": 1}})
  assert (error.field, error.value) == ("name", 3)


def test_optional_accepts_null_and_checks_values():
  base = {"name": "x", "privacy": {"batch_size": 1}}
  assert config_io.from_dict(Experiment, {**base, "seed": None}).seed is None
  error = _error(Experiment, {**base, "seed": 0.5})
  assert error.field == "seed"


def test_tuple_errors_name_the_item():
  base = {"name": "x", "privacy": {"batch_size": 1}}
  error = _error(Experiment, {**base, "learning_rates": [0.1, "fast"]})
  assert (error.field, error.value) == ("learning_rates[1]", "fast")
  error = _error(Experiment, {**base, "tags": "a"})
  assert (error.field, error.allowed) == ("tags", "must be a list")
  error = _error(Experiment, {**base, "image_shape": [8, 8]})
  assert error.field == "image_shape"
  assert "3 items" in error.allowed


def test_literal_lists_the_choices():
  error = _error(Experiment, {
      "name": "x", "privacy": {"batch_size": 1}, "optimizer": "rmsprop"})
  assert error.field == "optimizer"
  assert error.allowed == "must be one of ['sgd', 'adam']"


def test_dict_field_must_be_a_mapping():
  error = _error(Experiment, {
      "name": "x", "privacy": {"batch_size": 1}, "extra": [1]})
  assert (error.field, error.allowed) == ("extra", "must be a mapping")


def test_unknown_key_suggests_the_closest_field():
  error = _error(Experiment, {"name": "x", "privacy": {"batch_sise": 8}})
  assert error.field == "privacy.batch_sise"
  assert 'did you mean "batch_size"?' in error.allowed
  assert "batch_size, noise_multiplier, clip_norm" in error.allowed


def test_unknown_key_without_a_close_field_lists_the_allowed_ones():
  error = _error(Privacy, {"batch_size": 8, "zzz": 1})
  assert error.field == "zzz"
  assert "did you mean" not in error.allowed
  assert "allowed keys: batch_size, noise_multiplier, clip_norm" in (
      error.allowed)


def test_missing_required_field_names_its_path():
  error = _error(Experiment, {"name": "x", "privacy": {}})
  assert error.field == "privacy.batch_size"
  assert "required" in error.allowed


def test_section_that_is_not_a_mapping_names_its_path():
  error = _error(Experiment, {"name": "x", "privacy": 256})
  assert (error.field, error.value) == ("privacy", 256)
  assert "batch_size" in error.allowed
  assert _error(Privacy, [1]).field == "Privacy"


def test_post_init_error_gets_the_path_prefixed():
  error = _error(Experiment, {"name": "x", "privacy": {"batch_size": 0}})
  assert (error.field, error.value) == ("privacy.batch_size", 0)
  assert error.allowed == "an integer >= 1"


def test_post_init_error_with_a_dotted_field_is_left_alone():
  error = _error(Deferred, {
      "privacy": {"batch_size": 1, "noise_multiplier": -1}})
  assert error.field == "privacy.noise_multiplier"


def test_post_init_error_at_the_top_level_is_unchanged():
  assert _error(Privacy, {"batch_size": 0}).field == "batch_size"


def test_round_trip_through_yaml(tmp_path):
  config = config_io.from_dict(Experiment, _experiment_data())
  plain = config_io.to_dict(config)
  assert plain["learning_rates"] == [0.5, 1.0, 2.0]
  assert plain["privacy"] == {
      "batch_size": 256, "noise_multiplier": 3.0, "clip_norm": 1.0}
  path = tmp_path / "config.yaml"
  path.write_text(yaml.safe_dump(plain))
  assert config_io.from_dict(Experiment, config_io.load_yaml(path)) == config


@pytest.mark.parametrize("config", [
    models.ModelConfig("wrn-16-4", norm_before_activation=True, num_groups=8),
    models.ModelConfig("small-cnn"),
    augment.AugmentConfig(
        "crop-flip", multiplicity=4, crop_padding=2, color_jitter=0.25),
    augment.AugmentConfig("none"),
])
def test_round_trip_of_real_configs(config):
  assert config_io.from_dict(type(config), config_io.to_dict(config)) == config


def test_real_config_errors_keep_their_own_dotted_field():
  with pytest.raises(ConfigError) as info:
    config_io.from_dict(
        augment.AugmentConfig, {"family": "none", "multiplicity": 2})
  assert info.value.field == "augment.multiplicity"


@dataclasses.dataclass(frozen=True)
class Search:
  # The file's word; the code's name says what it is.
  search_algorithm: str = dataclasses.field(default="tpe",
                                            metadata={"key": "sampler"})


def test_a_field_may_keep_another_key_in_files():
  search = config_io.from_dict(Search, {"sampler": "random"})
  assert search.search_algorithm == "random"
  assert config_io.to_dict(search) == {"sampler": "random"}
  error = _error(Search, {"search_algorithm": "random"})
  assert error.field == "search_algorithm" and "sampler" in error.allowed


def test_to_dict_rejects_non_dataclasses():
  with pytest.raises(TypeError):
    config_io.to_dict({"a": 1})


def test_load_yaml_reads_exponents_as_floats(tmp_path):
  path = tmp_path / "c.yaml"
  path.write_text("lr: 1e-3\nsteps: 1e3\nbig: 1.5e3\ncount: 1000\n")
  assert config_io.load_yaml(path) == {
      "lr": 0.001, "steps": 1000.0, "big": 1500.0, "count": 1000}
  assert type(config_io.load_yaml(path)["count"]) is int


def test_load_yaml_missing_file(tmp_path):
  path = tmp_path / "absent.yaml"
  with pytest.raises(ConfigError) as info:
    config_io.load_yaml(path)
  assert info.value.field == str(path)
  assert "readable YAML file" in info.value.allowed


def test_load_yaml_syntax_error_has_line_and_column(tmp_path):
  path = tmp_path / "bad.yaml"
  path.write_text("name: x\nprivacy:\n  batch_size: : 3\n")
  with pytest.raises(ConfigError) as info:
    config_io.load_yaml(path)
  assert info.value.field == f"{path}:3:15"
  assert info.value.value == "batch_size: : 3"
  assert info.value.allowed.startswith("must be valid YAML: ")


def test_load_yaml_rejects_duplicate_keys(tmp_path):
  path = tmp_path / "dup.yaml"
  path.write_text("a: 1\nb: 2\na: 3\n")
  with pytest.raises(ConfigError) as info:
    config_io.load_yaml(path)
  assert info.value.field == f"{path}:3:1"
  assert "duplicate key 'a'" in info.value.allowed


@pytest.mark.parametrize("text", ["- 1\n- 2\n", "just text\n", ""])
def test_load_yaml_top_level_must_be_a_mapping(tmp_path, text):
  path = tmp_path / "list.yaml"
  path.write_text(text)
  with pytest.raises(ConfigError) as info:
    config_io.load_yaml(path)
  assert info.value.field == str(path)
  assert "mapping" in info.value.allowed


def test_load_yaml_rejects_binary_files(tmp_path):
  path = tmp_path / "weights.yaml"
  path.write_bytes(b"\xff\xfe\x00")
  with pytest.raises(ConfigError) as info:
    config_io.load_yaml(path)
  assert info.value.field == str(path)


def test_flatten_names_nested_params_by_path():
  assert config_io.flatten({"a": {"b": 1, "c": {"d": 2}}, "e": 3}) == {
      "a.b": 1, "a.c.d": 2, "e": 3}
