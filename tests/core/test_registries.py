"""tan_tune.registries: one kind's names and the object each names."""

import pytest

from tan_tune import registries
from tan_tune.errors import ConfigError


def test_a_registered_class_is_named_by_its_name_in_order():
  registry = registries.Registry("sampler")

  @registry.register
  class Grid:
    name = "grid"

  @registry.register
  class Sobol:
    name = "sobol"

  assert registry.names() == ("grid", "sobol")
  assert isinstance(registry.named("sobol"), Sobol)
  assert registry.named("grid") is registry.named("grid")  # One instance.
  assert Grid.name == "grid"  # The decorator hands the class back.


def test_an_unknown_name_is_one_line_naming_the_field_and_the_names():
  registry = registries.Registry("scheduler", "must be one of {}")
  registry.register(type("Fifo", (), {"name": "fifo"}))
  with pytest.raises(ConfigError) as error:
    registry.named("hyperband")
  assert (error.value.field, error.value.value, error.value.allowed) == (
      "scheduler", "hyperband", "must be one of ['fifo']")
