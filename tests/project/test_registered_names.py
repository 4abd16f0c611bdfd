"""A registered name is parsed once, then never compared as a string.

Every extension kind has one registry (batch samplers, adjacencies,
accountants, clipping engines, model families, tuning strategies, Optuna's
samplers, Tune's schedulers): a spelling becomes its registered object where
the config is read, and code then asks the object. This scan finds the
comparisons (==, !=, in, not in, a `match` case) of a string literal, or a
tuple, set or list of them, with any name a registry holds, outside the
parsing functions named here. The names are read from the registries
themselves, so a new registration is counted.
"""

import ast
import pathlib

import pytest

from tan_tune.privacy import accountant_registry
from tan_tune.privacy import samplers
from tan_tune.search import schedulers
from tan_tune.search import search_algorithms
from tan_tune.search import tuning_mode
from tan_tune.training import clipping
from tan_tune.training import model_families
# Registers the built-in model families.
from tan_tune.training import models  # pylint: disable=unused-import

import test_layout

# Where a spelling becomes its registered object: whole modules, and the
# functions of a module ('path': {function names}).
PARSING_MODULES = {"config_io.py"}
PARSERS = {
    "privacy/samplers.py": {"parse"},
    "privacy/accountant_registry.py": {"named"},
    "training/clipping.py": {"named", "resolve", "fallback", "estimates"},
    "training/model_families.py": {"matches", "family_of", "takes"},
    "search/tuning_mode.py": {"named", "found"},
    "search/search_algorithms.py": {"named"},
    "search/schedulers.py": {"named"},
}
_COMPARISONS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)


def registered_names() -> set[str]:
  """Every name any registry holds now."""
  return {
      *samplers.names(),
      *samplers.ADJACENCIES,
      *(accountant.name for accountant in accountant_registry.registered()),
      *clipping.ENGINES,
      *(name for family in model_families.families()
        for name in family.names),
      *tuning_mode.names(),
      *search_algorithms.names(),
      *schedulers.names(),
  }


def _literals(node: ast.AST) -> set[str]:
  """The strings a literal, or a tuple, set or list of literals, holds."""
  if isinstance(node, ast.Constant) and isinstance(node.value, str):
    return {node.value}
  if isinstance(node, (ast.Tuple, ast.Set, ast.List)):
    return set().union(*map(_literals, node.elts))
  return set()


def _pattern_literals(pattern: ast.pattern) -> set[str]:
  """The strings a `match` case's pattern compares with."""
  return set().union(*(
      _literals(node.value) for node in ast.walk(pattern)
      if isinstance(node, ast.MatchValue)))


def _parsing_lines(tree: ast.Module, parsers: set[str]) -> set[int]:
  """The lines of the functions named in `parsers`."""
  return {line for node in ast.walk(tree)
          if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
          and node.name in parsers
          for line in range(node.lineno, node.end_lineno + 1)}


def comparisons(package: pathlib.Path = test_layout.PACKAGE,
                names: set[str] | None = None) -> list[str]:
  """'file:line: name' for every comparison of a registered name outside
  parsing."""
  names = registered_names() if names is None else names
  found = []
  for path in sorted(package.rglob("*.py")):
    module = path.relative_to(package).as_posix()
    if module in PARSING_MODULES:
      continue
    tree = ast.parse(path.read_text())
    parsing = _parsing_lines(tree, PARSERS.get(module, set()))
    for node in ast.walk(tree):
      compared = set()
      if isinstance(node, ast.Compare) and any(
          isinstance(op, _COMPARISONS) for op in node.ops):
        compared = set().union(*map(_literals, [node.left, *node.comparators]))
      elif isinstance(node, ast.match_case):
        compared = _pattern_literals(node.pattern)
        node = node.pattern
      found += [(module, node.lineno, name) for name in compared & names
                if node.lineno not in parsing]
  return [f"{module}:{line}: {name!r}" for module, line, name in sorted(found)]


def test_no_registered_name_is_compared_outside_parsing():
  assert comparisons() == []


def test_the_names_come_from_the_registries():
  names = registered_names()
  assert {"poisson", "truncated-poisson", "fixed", "fixed-with-replacement",
          "add/remove-one", "replace-one", "rdp", "pld-jl", "fast", "jl",
          "small-cnn", "dp-cnn-gn", "scatternet-cnn", "non_private",
          "private_random_search", "tpe", "random", "fifo", "asha"} <= names


@pytest.mark.parametrize("module, line, expected", [
    ("search/driver.py",
     "def _uses_asha(space):\n  return space.scheduler == 'asha'",
     "'asha'"),
    ("training/trial.py",
     "def _estimated(name):\n  return name in ('jl', 'other')", "'jl'"),
    ("promote/gate.py",
     "def _kind(mode):\n  match mode:\n    case 'public_data' | 'other':\n"
     "      return 1", "'public_data'"),
])
def test_an_injected_comparison_is_caught(tmp_path, module, line, expected):
  copy = test_layout._copy_with(tmp_path, module, line)  # pylint: disable=protected-access
  new = sorted(set(comparisons(copy)) - set(comparisons()))
  assert [finding.split(": ", 1) for finding in new] == [
      [f"{module}:{_last_line(copy / module, expected)}", expected]]


def _last_line(path: pathlib.Path, text: str) -> int:
  """The number of the last line of `path` that holds `text`."""
  lines = path.read_text().splitlines()
  return max(n for n, line in enumerate(lines, 1) if text in line)
