"""The API reference documents every name of `tan_tune.api`.

The site's reference page (docs/reference/api.md) renders each name of
`tan_tune.api.__all__` from its docstring with mkdocstrings, which reads the
source through griffe; these tests read it the same way. Each name has a
docstring; a function's documents each of its parameters under `Args:`; a
class's documents each of its constructor's parameters under `Args:` or
`Attributes:` (a dataclass's fields); an error a function raises itself is
named under `Raises:`; and the page renders each name once.
"""

import ast
import pathlib
import textwrap
import re

import griffe
import pytest

from tan_tune import api

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "reference" / "api.md"


@pytest.fixture(scope="module")
def package() -> griffe.Module:
  return griffe.load("tan_tune.api", search_paths=[str(ROOT)],
                     docstring_parser="google")


def _target(package: griffe.Module, name: str) -> griffe.Object:
  found = package[name]
  return found.final_target if found.is_alias else found


def _documented(docstring: griffe.Docstring | None) -> set[str]:
  """The names a docstring's `Args:` and `Attributes:` sections describe."""
  sections = docstring.parse("google") if docstring else []
  return {item.name for section in sections
          if section.kind in (griffe.DocstringSectionKind.parameters,
                              griffe.DocstringSectionKind.attributes)
          for item in section.value}


def _parameters(target: griffe.Object) -> list[str]:
  if not (target.is_function or target.is_class):
    return []
  return [parameter.name for parameter in target.parameters
          if parameter.name not in ("self", "cls")
          and parameter.kind not in (griffe.ParameterKind.var_positional,
                                     griffe.ParameterKind.var_keyword)]


@pytest.mark.parametrize("name", api.__all__)
def test_each_name_has_a_docstring(package, name):
  target = _target(package, name)
  assert target.docstring and target.docstring.value.strip(), (
      f"tan_tune.api.{name} ({target.path}) has no docstring")


@pytest.mark.parametrize("name", api.__all__)
def test_each_parameter_is_documented(package, name):
  target = _target(package, name)
  documented = _documented(target.docstring)
  if target.is_class and "__init__" in target.members:
    documented |= _documented(target.members["__init__"].docstring)
  missing = [p for p in _parameters(target) if p not in documented]
  assert missing == [], (
      f"tan_tune.api.{name} ({target.path}) does not document {missing}")


def _raised(target: griffe.Object) -> set[str]:
  """The exception classes a function's own body raises by name."""
  tree = ast.parse(textwrap.dedent(target.source))
  found = set()
  for node in ast.walk(tree):
    error = node.exc if isinstance(node, ast.Raise) else None
    error = error.func if isinstance(error, ast.Call) else error
    if isinstance(error, (ast.Name, ast.Attribute)):
      found.add(error.id if isinstance(error, ast.Name) else error.attr)
  return found


@pytest.mark.parametrize("name", api.__all__)
def test_each_error_a_function_raises_is_documented(package, name):
  target = _target(package, name)
  if not target.is_function:
    return
  sections = target.docstring.parse("google") if target.docstring else []
  named = " ".join(str(item.annotation) for section in sections
                   if section.kind is griffe.DocstringSectionKind.raises
                   for item in section.value)
  missing = sorted(error for error in _raised(target) if error not in named)
  assert missing == [], (
      f"tan_tune.api.{name} ({target.path}) raises {missing} undocumented")


def test_the_reference_page_renders_every_name_once():
  rendered = re.findall(r"^::: tan_tune\.api\.(\w+)$", PAGE.read_text(),
                        flags=re.M)
  assert sorted(rendered) == sorted(api.__all__)
