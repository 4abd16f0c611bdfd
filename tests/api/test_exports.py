"""`tan_tune.api` (`api/__init__.py`): importing it loads none of its
modules; each exported name loads its own on first use, and is the one that
module holds."""

import ast
import importlib
import pathlib
import subprocess
import sys

import pytest

from tan_tune import api

INIT = pathlib.Path(api.__file__)


def test_importing_the_api_loads_none_of_its_modules():
  probe = ("import sys\nimport tan_tune.api\n"
           "print(sorted(name for name in sys.modules"
           " if name.startswith('tan_tune')))")
  done = subprocess.run([sys.executable, "-c", probe], capture_output=True,
                        text=True, check=True)
  assert done.stdout.strip() == (
      "['tan_tune', 'tan_tune.api', 'tan_tune.errors']")


@pytest.mark.parametrize("name", [n for n in api.__all__
                                  if n != "ConfigError"])
def test_each_name_is_its_modules(name):
  module = importlib.import_module(f"tan_tune.api.{api._MODULE_OF[name]}")
  assert getattr(api, name) is getattr(module, name)
  assert name in dir(api)


def test_the_type_checkers_imports_are_the_exports():
  """The TYPE_CHECKING block names each export from its module."""
  block, = [node for node in ast.parse(INIT.read_text()).body
            if isinstance(node, ast.If)]
  imported = {(node.module.rpartition(".")[2], alias.name)
              for node in block.body for alias in node.names}
  assert imported == {(module, name)
                      for module, names in api._MODULES.items()
                      for name in names}


def test_no_export_is_named_as_a_module():
  """Importing `api/x.py` sets the attribute x: an export named so would be
  replaced by the module."""
  modules = {path.stem for path in INIT.parent.glob("*.py")}
  assert set(api._MODULES) <= modules
  assert modules.isdisjoint(api.__all__)


def test_an_unknown_name_is_an_attribute_error():
  with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
    api.nothing  # pylint: disable=pointless-statement
