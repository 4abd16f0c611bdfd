"""tan_tune.search.strategy: what a tuning strategy must say, and what it
inherits."""

import pathlib

import pytest

from tan_tune.errors import ConfigError
from tan_tune.search import space as search_space
from tan_tune.search import strategy

SPACES = pathlib.Path(__file__).resolve().parents[2] / "search_spaces"


class _Bare(strategy.TuningStrategy):
  name = "bare"
  note = guarantee = "nothing"

  def parent_fields(self, resolved, data):
    return {}, {}

  def callbacks(self, resolved, tracking_uri, record, trial_count):
    return []

  def trial_run(self, resolved, params):
    raise NotImplementedError

  def finish(self, resolved, results, record, directory, state, resumed):
    return strategy.Finished([], None)


def test_a_strategy_must_say_what_its_trials_train_and_how_it_ends():
  assert strategy.TuningStrategy.__abstractmethods__ == {
      "parent_fields", "callbacks", "trial_run", "finish"}
  with pytest.raises(TypeError, match="abstract"):
    type("Half", (strategy.TuningStrategy,), {"name": "half"})()


def test_the_defaults_publish_trials_charge_nothing_and_release_nothing(
    tmp_path):
  bare = _Bare()
  space = search_space.load_search_space(SPACES / "digits-demo.yaml")
  bare.check_space(space)
  assert not bare.secret and bare.search_epsilon(space, None, 1e-5) is None
  assert bare.trial_count({}, space, None) == space.num_trials
  assert bare.seal(None, {}) is None and bare.trial_names() == {}
  assert bare.study_copy(tmp_path).startswith("sqlite:///")
  bare.refuse_promotion("SEARCH_DIR", "x")  # Promote may take it.
  with pytest.raises(ConfigError, match="--register"):
    bare.check_options(None, "digits")
