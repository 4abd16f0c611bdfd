"""Each way of tuning is one strategy object, and the driver asks it."""

import ast
import pathlib

import optuna
import pytest

from tan_tune.errors import ConfigError
from tan_tune.privacy import tuning
from tan_tune.search import modes
from tan_tune.search import private_search
from tan_tune.search import space as search_space
from tan_tune.search import tuning_mode

SPACES = pathlib.Path(__file__).resolve().parents[2] / "search_spaces"
DRIVER = (pathlib.Path(__file__).resolve().parents[2] / "tan_tune" / "search"
          / "driver.py")


def _shipped(name: str) -> search_space.SearchSpace:
  return search_space.load_search_space(SPACES / f"{name}.yaml")


def test_every_way_of_tuning_has_its_mode():
  assert tuning_mode.names() == ("non_private", "public_data",
                                 tuning.PRIVATE_RANDOM_SEARCH)
  assert isinstance(modes.for_space(_shipped("digits-demo")),
                    modes.SimulatedSearch)
  assert isinstance(modes.for_space(_shipped("digits-private")),
                    modes.PrivateRandomSearch)


def test_the_driver_has_no_branch_on_the_mode():
  """Nothing in the driver names a mode or a mode's own field."""
  names = {node.attr for node in ast.walk(ast.parse(DRIVER.read_text()))
           if isinstance(node, ast.Attribute)}
  assert not names & {"private_trials", "public_dataset",
                      "PRIVATE_RANDOM_SEARCH", "PUBLIC_DATA", "NON_PRIVATE"}


def test_a_simulated_search_is_seeded_and_published():
  mode = modes.for_space(_shipped("digits-demo"))
  space = _shipped("digits-demo")
  assert not mode.secret
  assert isinstance(mode.search_algorithm(space), optuna.samplers.TPESampler)
  assert mode.trial_names() == {}
  assert mode.trial_count({}, space, None) == space.num_trials
  assert mode.trial_count({}, space, 3) == 3
  mode.check_options(3, None)
  # Its trials are simulations: no model of theirs is released to register.
  with pytest.raises(ConfigError, match="--register.*releases no model"):
    mode.check_options(None, "digits")
  mode.check_resume({"parent_run_id": "p"}, pathlib.Path("runs/x"))


def test_a_private_random_search_keeps_its_trials_secret(tmp_path):
  mode = modes.for_space(_shipped("digits-private"))
  space = _shipped("digits-private")
  assert mode.secret
  # Drawn at random from a seed no one knows; trials named at random.
  assert isinstance(mode.search_algorithm(space),
                    optuna.samplers.RandomSampler)
  assert mode.study_copy(tmp_path) is None
  names = mode.trial_names()
  assert names["trial_name_creator"] is private_search.opaque_name
  assert mode.trial_count({"trial_count": 5}, space, None) == 5
  with pytest.raises(ConfigError, match="--num-samples"):
    mode.check_options(3, None)
  mode.check_options(None, "digits")  # Its release may be registered.
  with pytest.raises(FileExistsError, match="released its result"):
    mode.check_resume({"released": True}, tmp_path)
  mode.protect(tmp_path)
  assert tmp_path.stat().st_mode & 0o777 == 0o700


def test_each_mode_says_what_its_trials_train():
  """A simulated search's trial stands for the reference run at a smaller
  batch; a private search's trial is the reference run itself, private and
  evaluated at most about 100 times. trials.py knows no mode."""
  from tan_tune.search import resolved as resolved_lib  # pylint: disable=g-import-not-at-top
  from tan_tune.training import trial_config  # pylint: disable=g-import-not-at-top

  demo = resolved_lib.resolve(_shipped("digits-demo"), 1437)
  params = {"lr": 1.0, "simulation_batch_size": 64}
  simulated = modes.for_space(demo.space).trial_run(demo, params)
  assert simulated.privacy.simulated and simulated.privacy.batch_size == 64
  assert simulated.privacy.reference_batch_size == 512

  private = resolved_lib.resolve(_shipped("digits-private"), 1437)
  params = {"lr": 1.0, "simulation_batch_size": 512}
  trial = modes.for_space(private.space).trial_run(private, params)
  assert not trial.privacy.simulated and trial.privacy.batch_size == 512
  assert trial.eval_every == trial_config.private_eval_every(
      trial.privacy.steps, private.space.eval_every)
  trials_source = (DRIVER.parent / "trials.py").read_text()
  assert "private_trials" not in trials_source
