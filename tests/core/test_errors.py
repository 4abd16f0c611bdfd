"""Tests of the one error type for bad input (`errors.py`)."""

import pickle

from tan_tune.errors import ConfigError


def test_the_message_names_the_field_the_value_and_what_is_allowed():
  error = ConfigError("privacy.steps", 0, "an integer >= 1")
  assert str(error) == "privacy.steps: 0 is not allowed; an integer >= 1"


def test_it_survives_the_trip_from_a_ray_worker():
  error = pickle.loads(pickle.dumps(ConfigError("canaries.count", 0, "m >= 1")))
  assert (error.field, error.value, error.allowed) == ("canaries.count", 0,
                                                       "m >= 1")
  assert str(error) == "canaries.count: 0 is not allowed; m >= 1"
