"""The package is a pipeline, and its imports only go downwards.

    errors, config_io  <  privacy/  <  training/  <  search/  <  promote/  <  cli/

A module may import its own stage and the stages below it. `cli/` is the
top: nothing outside it imports it, and inside it only the entry point
(`main.py`, `__main__.py`) imports the subcommand modules, which share
`args.py` (and `privacy_tables.py`, the calculator's printing) alone.
"""

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "tan_tune"
STAGES = ("", "privacy", "training", "search", "promote", "cli")
CLI_ENTRY_POINTS = ("tan_tune.cli.main", "tan_tune.cli.__main__")
CLI_SHARED = ("tan_tune.cli.args", "tan_tune.cli.privacy_tables")


def _module_name(path: pathlib.Path, package: pathlib.Path) -> str:
  parts = path.relative_to(package.parent).with_suffix("").parts
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _stage(module: str) -> str:
  parts = module.split(".")
  return parts[1] if len(parts) > 1 and parts[1] in STAGES else ""


def _imports(path: pathlib.Path) -> list[str]:
  """Every tan_tune module `path` imports, `from a import b` as a.b."""
  found = []
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.Import):
      found += [a.name for a in node.names if a.name.startswith("tan_tune")]
    elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
        "tan_tune"):
      found += [f"{node.module}.{a.name}" for a in node.names]
  return found


def violations(package: pathlib.Path = PACKAGE) -> list[str]:
  """'importer -> imported: why' for every import against the pipeline."""
  found = []
  for path in sorted(package.rglob("*.py")):
    importer = _module_name(path, package)
    for imported in _imports(path):
      low, high = STAGES.index(_stage(importer)), STAGES.index(_stage(imported))
      if high > low:
        found.append(f"{importer} -> {imported}: an upward import")
      elif _stage(imported) == "cli" and not (
          importer in CLI_ENTRY_POINTS
          or (_stage(importer) == "cli" and imported in CLI_SHARED)):
        found.append(f"{importer} -> {imported}: only the entry point"
                     " imports cli modules")
  return found


def test_imports_only_go_downwards():
  assert violations() == []


@pytest.mark.parametrize("module, line", [
    ("privacy/triplet.py", "from tan_tune.training import trial"),
    ("training/trial.py", "from tan_tune.search import space"),
    ("search/driver.py", "from tan_tune.promote import plan"),
    ("promote/run.py", "from tan_tune.cli import args"),
    ("cli/search.py", "from tan_tune.cli import promote"),
])
def test_an_upward_or_sideways_import_is_caught(tmp_path, module, line):
  """The check itself, on a copy of the package with one bad import added."""
  copy = tmp_path / "tan_tune"
  for path in PACKAGE.rglob("*.py"):
    target = copy / path.relative_to(PACKAGE)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(path.read_text())
  bad = copy / module
  bad.write_text(bad.read_text() + f"\n{line}\n")
  [violation] = violations(copy)
  assert violation.startswith(module[:-3].replace("/", ".").join(
      ["tan_tune.", ""]))


def test_every_stage_says_what_it_is_and_what_it_may_import():
  for stage in STAGES[1:]:
    doc = ast.get_docstring(ast.parse((PACKAGE / stage / "__init__.py")
                                      .read_text()))
    assert doc and "import" in doc, stage


def test_no_module_is_over_400_lines():
  long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
          if (n := len(p.read_text().splitlines())) > 400}
  assert long == {}
