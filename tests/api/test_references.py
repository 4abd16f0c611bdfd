"""Tests of Python callables given as factories: the references Ray's workers
import them by, and those refused because no import leads back to them."""

import functools
import os
import pathlib
import subprocess
import sys

import pytest

import plugin_factories
from tan_tune.api import references
from tan_tune.errors import ConfigError

TESTS = pathlib.Path(__file__).resolve().parents[1]


def test_a_module_level_function_or_class_is_named_by_its_module():
  assert references.reference_of("model.factory", plugin_factories.tabular_mlp
                                 ) == "plugin_factories:tabular_mlp"
  assert references.reference_of(
      "dataset.factory", plugin_factories.RecordTable
  ) == "plugin_factories:RecordTable"


def _closure():
  def build():
    return plugin_factories.tabular_mlp()
  return build


@pytest.mark.parametrize("factory", [
    lambda: plugin_factories.tabular_mlp(),
    _closure(),
    functools.partial(plugin_factories.tabular_mlp, features=3),
])
def test_what_no_import_leads_back_to_is_refused(factory):
  with pytest.raises(ConfigError) as error:
    references.reference_of("model.factory", factory)
  assert error.value.field == "model.factory"
  assert "a lambda or a closure has none" in error.value.allowed


def test_a_name_that_leads_elsewhere_is_refused(monkeypatch):
  def impostor():
    return None
  impostor.__module__, impostor.__qualname__ = "plugin_factories", "broken"
  with pytest.raises(ConfigError) as error:
    references.reference_of("model.factory", impostor)
  assert "leads elsewhere" in error.value.allowed


def test_callables_in_a_search_mapping_become_references_in_a_copy():
  space = {"name": "s",
           "model": {"factory": plugin_factories.tabular_mlp,
                     "kwargs": {"features": 6}},
           "dataset": {"factory": "plugin_factories:tabular_tensors"}}
  named = references.with_references(space)
  assert named["model"] == {"factory": "plugin_factories:tabular_mlp",
                            "kwargs": {"features": 6}}
  assert named["dataset"]["factory"] == "plugin_factories:tabular_tensors"
  assert space["model"]["factory"] is plugin_factories.tabular_mlp


_SCRIPT = """
from torch import nn
from tan_tune.api import references
from tan_tune.errors import ConfigError

def build():
  return nn.Linear(3, 2)

if __name__ == "__main__":
  try:
    print(references.reference_of("model.factory", build))
  except ConfigError as error:
    print(error)
"""


@pytest.mark.parametrize("run_from, expected", [
    ("script", "team_script:build"),
    ("elsewhere", "outside the command's folder"),
])
@pytest.mark.slow
def test_a_function_of_the_running_script_is_named_by_its_file(
    tmp_path, run_from, expected):
  folder = tmp_path / "script"
  folder.mkdir()
  (tmp_path / "elsewhere").mkdir()
  (folder / "team_script.py").write_text(_SCRIPT)
  result = subprocess.run(
      [sys.executable, str(folder / "team_script.py")], cwd=tmp_path / run_from,
      capture_output=True, text=True, timeout=120, check=True,
      env=dict(os.environ, PYTHONPATH=str(TESTS)))
  assert expected in result.stdout
