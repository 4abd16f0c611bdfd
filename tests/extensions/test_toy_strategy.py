"""A tuning strategy of one's own, registered as the built-ins are, runs a
real search through the API: 'first-two', the simulated search cut to its
first two trials whatever the file's `num_trials` says. Its name is the
search's `tuning_privacy` on the MLflow parent run the result names."""

import pathlib

from mlflow import MlflowClient
import pytest
import yaml

from tan_tune import api
from tan_tune import mlflow_store
from tan_tune.search import modes
from tan_tune.search import tuning_mode

import mlflow_stores

pytestmark = [pytest.mark.e2e]

DEMO = (pathlib.Path(__file__).resolve().parents[2] / "search_spaces"
        / "digits-demo.yaml")
NOTE = "the simulated search's first two trials, whatever num_trials says"


@pytest.fixture
def first_two(monkeypatch):
  """The strategy, registered for this test only."""
  monkeypatch.setattr(tuning_mode, "_STRATEGIES",
                      dict(tuning_mode._STRATEGIES))  # pylint: disable=protected-access

  # Defined in a function, as in a notebook: the driver hands it to Ray's
  # workers by value, where no one registered it.
  @tuning_mode.register
  class FirstTwo(modes.SimulatedSearch):
    name = "first-two"
    note = NOTE

    def trial_count(self, state, space, num_samples):
      return 2

  return FirstTwo


def test_a_registered_strategy_runs_a_search(tmp_path, local_ray, first_two):
  del local_ray
  # The digits demo cut to 20 steps on one worker: a trial takes a second.
  space = yaml.safe_load(DEMO.read_text())
  space.update(name="toy-strategy", tuning_privacy=first_two.name,
               eval_every=10, max_concurrent=1)
  space["reference"].update(steps=20, noise_multiplier=6.0)
  uri = mlflow_stores.store(tmp_path)
  found = api.search(space, storage=tmp_path / "runs", tracking_uri=uri)
  assert space["num_trials"] == 8
  assert [row["status"] for row in found.leaderboard] == ["finished"] * 2
  parent = MlflowClient(uri).get_run(found.parent_run_id)
  assert parent.data.params["tuning_privacy"] == "first-two"
  assert parent.data.tags[mlflow_store.TUNING_TAG] == "first-two"
  assert parent.data.tags["tan_tune.note"] == NOTE
