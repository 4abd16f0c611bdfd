"""A search file resolved once against its data, saved, and read back."""

import dataclasses
import pathlib
import shutil

import pytest

from tan_tune.errors import ConfigError
from tan_tune.privacy import accounting
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.privacy import tuning
from tan_tune.search import compute
from tan_tune.search import resolved as resolved_lib
from tan_tune.search import search_files
from tan_tune.search import space as search_space
from tan_tune.training import datasets
import digits_data

SPACES = pathlib.Path(__file__).resolve().parents[2] / "search_spaces"
CIFAR10_N = 50_000
IMAGENET_N = 1_281_167
DIGITS_N = 1437


def _shipped(name: str) -> search_space.SearchSpace:
  return search_space.load_search_space(SPACES / f"{name}.yaml")


def test_the_reference_triplet_and_delta_are_fixed_once():
  resolved = resolved_lib.resolve(_shipped("cifar10-wrn16-4"), CIFAR10_N)
  assert resolved.reference == triplet_lib.PrivacyTriplet(
      CIFAR10_N, 4096, 3.0, 2500)
  assert resolved.dataset_size == CIFAR10_N
  assert resolved.delta == accounting.default_delta(CIFAR10_N)
  assert resolved.search_epsilon is None  # Not accounted: not private.


def test_resolved_json_holds_nothing_computed_from_the_examples(tmp_path):
  """The unkeyed digest of the examples was a membership oracle: a private
  search's resolved.json held it whole."""
  data = datasets.load_dataset(digits_data.DIGITS)
  resolved = resolved_lib.resolve(_shipped("digits-private"), data.num_train)
  text = resolved_lib.save(resolved, tmp_path).read_text()
  assert "identity" not in text and "fingerprint" not in text
  assert not digits_data.leaked_windows(text)


@pytest.mark.parametrize("name, size", [("digits-private", DIGITS_N),
                                        ("fashion-mnist-private", 60_000)])
def test_a_private_search_is_priced_once_for_the_whole_search(name, size):
  space = _shipped(name)
  resolved = resolved_lib.resolve(space, size)
  expected = tuning.search_epsilon(resolved.reference, resolved.delta,
                                   space.trial_count, space.score_noise)
  assert resolved.search_epsilon == expected
  assert expected.epsilon <= space.reference.target_epsilon


def test_saved_and_read_back_it_is_the_same(tmp_path):
  for name, size in (("digits-private", DIGITS_N),
                     ("imagenet-nfresnet50", IMAGENET_N)):
    folder = tmp_path / name
    folder.mkdir()
    shutil.copyfile(SPACES / f"{name}.yaml", folder / search_files.SPACE_FILE)
    resolved = resolved_lib.resolve(_shipped(name), size)
    resolved_lib.save(resolved, folder)
    assert resolved_lib.load(folder) == resolved


def test_a_reference_batch_above_n_is_refused():
  space = _shipped("cifar10-wrn16-4")
  with pytest.raises(ConfigError) as info:
    resolved_lib.resolve(space, 4000)
  assert info.value.field == "reference.batch_size"


def test_a_steps_grid_batch_above_n_is_refused():
  space = _shipped("imagenet-nfresnet50")
  resolved_lib.resolve(space, IMAGENET_N)
  # S = 18000 needs B = 16384 sqrt(4) = 32768.
  with pytest.raises(ConfigError) as info:
    resolved_lib.resolve(space, 30_000)
  assert info.value.field == "steps_grid"


def test_a_reference_over_budget_is_refused():
  # On half of CIFAR-10, the same triplet spends more than eps = 8.
  with pytest.raises(ConfigError, match="reference.target_epsilon"):
    resolved_lib.resolve(_shipped("cifar10-wrn16-4"), CIFAR10_N // 2)


def _digits_below_the_wall(steps_grid):
  """The digits demo at sigma = 1, where more steps at constant eta spend
  more: (1437, 512, 1.0, 40) spends 13.78 (RDP), its S = 160 candidate
  (B = 256) 14.38."""
  space = _shipped("digits-demo")
  return dataclasses.replace(
      space, steps_grid=steps_grid, reference=dataclasses.replace(
          space.reference, noise_multiplier=1.0, target_epsilon=14))


def test_every_candidate_reference_is_accounted_against_the_target():
  resolved_lib.resolve(_digits_below_the_wall((10, 40)), DIGITS_N)
  with pytest.raises(ConfigError) as info:
    resolved_lib.resolve(_digits_below_the_wall((10, 40, 160)), DIGITS_N)
  assert (info.value.field, info.value.value) == ("steps_grid", 160)
  assert "(B = 256, S = 160) it spends eps = 14.38" in info.value.allowed


def test_only_the_candidates_within_the_compute_budget_are_accounted():
  # S = 160 costs 256 x 160 = 40,960 example passes, over this budget.
  space = dataclasses.replace(
      _digits_below_the_wall((10, 40, 160)),
      compute_budget=compute.ComputeBudget(examples=30_000))
  assert space.proposed_steps() == (10, 40)
  resolved_lib.resolve(space, DIGITS_N)
