"""What is printed beside a search's or a promotion's result
(`api/reporting.py`)."""

import dataclasses
import pathlib

from tan_tune import api
from tan_tune.search import space as space_lib

SPACES = pathlib.Path(__file__).resolve().parents[2] / "search_spaces"


def test_a_winner_chosen_on_the_test_split_is_warned_of():
  space = space_lib.load_search_space(SPACES / "digits-demo.yaml")
  on_validation = dataclasses.replace(space, select_on="validation")
  on_test = dataclasses.replace(space, select_on="test")
  assert api.select_on_test_warning(on_validation) is None
  assert api.select_on_test_warning(on_test) == (
      space_lib.SELECT_ON_TEST_WARNING)


def test_hyper_parameters_read_as_people_read_them():
  assert api.format_params({"momentum": 0, "lr": 1.10812}) == (
      "lr=1.108, momentum=0")


def test_a_searchs_study_is_in_its_directory(tmp_path):
  assert api.study_storage(tmp_path).startswith(f"sqlite:///{tmp_path}/")
