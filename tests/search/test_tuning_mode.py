"""tan_tune.search.tuning_mode: what each tuning_privacy allows in a file."""

import copy
import pathlib
from typing import Any

import pytest
import yaml

from tan_tune.errors import ConfigError
from tan_tune.privacy import tuning
from tan_tune.search import modes
from tan_tune.search import resolved as resolved_lib
from tan_tune.search import space as search_space
from tan_tune.search import tuning_mode

DIGITS_N = 1437


def private_search(**changes: Any) -> dict[str, Any]:
  """A valid private random search on digits: B_ref 512, S 40, sigma 3.918
  (one run spends eps 2), about 3 trials scored on a fifth of the data with
  noise 2, budget 5."""
  data = {
      "name": "private",
      "dataset": {"name": "digits"},
      "model": {"name": "small-cnn"},
      "reference": {"batch_size": 512, "noise_multiplier": 3.918, "steps": 40,
                    "target_epsilon": 5},
      "simulation_batch_sizes": [512],
      "hyperparameters": {"lr": {"kind": "loguniform", "low": 0.5, "high": 4}},
      "tuning_privacy": "private_random_search",
      "trial_count": {"distribution": "logarithmic", "mean": 3},
      "sampler": "random",
      "validation_fraction": 0.2,
      "score_noise": 2.0,
      "device": "cpu",
  }
  for dotted, value in changes.items():
    *parents, leaf = dotted.split("__")
    node = data
    for key in parents:
      node = node.setdefault(key, {})
    if value is None:
      node.pop(leaf, None)
    else:
      node[leaf] = value
  return data


def load(tmp_path: pathlib.Path, data: dict[str, Any]):
  path = tmp_path / "space.yaml"
  path.write_text(yaml.safe_dump(copy.deepcopy(data)))
  space = search_space.load_search_space(path)
  resolved_lib.resolve(space, DIGITS_N)  # As `tan-tune search` does.
  return space


def test_a_private_random_search_loads(tmp_path):
  space = load(tmp_path, private_search())
  assert modes.for_space(space).secret and space.trial_count.mean == 3
  assert space.trial_dataset == space.dataset


@pytest.mark.parametrize("changes, field, allowed", [
    ({"sampler": "tpe"}, "sampler", "'random' in a private random search"),
    ({"scheduler": "asha"}, "scheduler", "ASHA stops trials"),
    ({"trial_count": None}, "trial_count", "required"),
    ({"simulation_batch_sizes": [64]}, "simulation_batch_sizes", "[512] (B_ref)"),
    ({"score_noise": None}, "score_noise", "required in a private random"
     " search selecting on validation"),
    ({"select_on": "test"}, "score_noise", "unset with select_on: test"),
    ({"steps_grid": [20, 40]}, "steps_grid", "every trial runs the reference"),
    ({"reference__target_epsilon": None}, "reference.target_epsilon",
     "the budget the whole search must fit"),
    ({"reference__sampling": "fixed"}, "reference.sampling",
     "only with Poisson sampling"),
    ({"clipping": "jl", "jl_projections": 32}, "reference.sampling",
     "JL clipping"),
    # About 3 trials at eps 2 each, scored, cost 3.11 in all: over 3.
    ({"reference__target_epsilon": 3}, "reference.target_epsilon",
     "at least the private search's eps = 3.112"),
    ({"trial_count": {"distribution": "uniform", "mean": 3}},
     "trial_count.distribution", "logarithmic, geometric"),
])
def test_a_private_search_refuses_what_its_accounting_does_not_cover(
    tmp_path, changes, field, allowed):
  with pytest.raises(ConfigError) as error:
    load(tmp_path, private_search(**changes))
  assert error.value.field == field
  assert allowed in str(error.value)


def test_public_data_needs_another_dataset(tmp_path):
  public = private_search(tuning_privacy="public_data", trial_count=None,
                          score_noise=None, sampler="tpe",
                          simulation_batch_sizes=[64],
                          public_dataset={"name": "synthetic"})
  space = load(tmp_path, public)
  assert space.trial_dataset.name == "synthetic"
  assert space.dataset.name == "digits"
  with pytest.raises(ConfigError, match="public_dataset: 'digits'.*other than"):
    load(tmp_path, dict(public, public_dataset={"name": "digits"}))
  with pytest.raises(ConfigError, match="public_dataset: None.*required"):
    load(tmp_path, dict(public, public_dataset=None))


@pytest.mark.parametrize("changes, field", [
    ({"tuning_privacy": "non_private", "sampler": "tpe",
      "public_dataset": {"name": "synthetic"}, "trial_count": None,
      "score_noise": None}, "public_dataset"),
    ({"tuning_privacy": "non_private", "sampler": "tpe"}, "trial_count"),
    ({"tuning_privacy": "non_private", "sampler": "tpe", "trial_count": None},
     "score_noise"),
    ({"tuning_privacy": "private"}, "tuning_privacy"),
    ({"sampler": "grid"}, "sampler"),
])
def test_fields_of_another_mode_are_refused(tmp_path, changes, field):
  with pytest.raises(ConfigError) as error:
    load(tmp_path, private_search(**changes))
  assert error.value.field == field


def test_the_shipped_private_search_spends_its_whole_budget():
  space = search_space.load_search_space(
      pathlib.Path(__file__).resolve().parents[2] / "search_spaces"
      / "digits-private.yaml")
  reference = resolved_lib.resolve(space, DIGITS_N).reference
  sigma = tuning.calibrate_search_sigma(4, reference, 1 / DIGITS_N,
                                        space.trial_count, space.score_noise)
  assert space.reference.noise_multiplier == sigma
  assert tuning.search_epsilon(reference, 1 / DIGITS_N, space.trial_count,
                               space.score_noise).epsilon <= 4


def test_selecting_on_test_is_possible_when_asked_and_says_optimistic(
    tmp_path):
  space = load(tmp_path, private_search(select_on="test", score_noise=None))
  mode = modes.for_space(space)
  assert mode.ranked_by(space) == space.metric
  assert "optimistic" in mode.select_on_test_warning


def test_an_unknown_tuning_mode_is_refused():
  with pytest.raises(ConfigError, match="tuning_privacy: 'tpe'"):
    tuning_mode.named("tpe")
