"""The docs tell the truth about the package: the architecture's module
table names every module, in its stage, the paths it names exist, and
nothing outside the repository is cited."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "tan_tune"
# What a reader of the repository cannot open: the folder beside it.
OUTSIDE = ".." + "/shared"
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def _layout_table() -> dict[str, set[str]]:
  """The architecture's module table as {stage folder ('' for the root):
  modules}."""
  text = ARCHITECTURE.read_text()
  table = text[text.index("| stage | module | what |"):]
  found, stage = {}, None
  for line in table.splitlines()[2:]:
    if not line.startswith("|"):
      break
    cells = [cell.strip() for cell in line.strip("|").split("|")]
    if cells[0]:
      stage = "" if cells[0] == "root" else cells[0].strip("`/")
    found.setdefault(stage, set()).update(re.findall(r"`([\w.]+\.py)`",
                                                     cells[1]))
  return found


def _package_modules() -> dict[str, set[str]]:
  found = {}
  for path in PACKAGE.rglob("*.py"):
    if path.name == "__init__.py":
      continue
    stage = path.parent.relative_to(PACKAGE).as_posix()
    found.setdefault("" if stage == "." else stage, set()).add(path.name)
  return found


def test_the_architecture_names_every_module_in_its_stage():
  assert _layout_table() == _package_modules()


def test_every_path_the_architecture_names_exists():
  named = set(re.findall(r"`((?:tan_tune|tests|docs|benchmarks)/[\w./]*)`",
                         ARCHITECTURE.read_text()))
  assert named and sorted(p for p in named if not (ROOT / p).exists()) == []


def test_nothing_outside_the_repository_is_cited():
  cited = [
      f"{path.relative_to(ROOT)}:{number}"
      for folder in ("tan_tune", "tests", "docs", "benchmarks", "examples",
                     "search_spaces", "cluster")
      for path in sorted((ROOT / folder).rglob("*"))
      if path.suffix in (".py", ".md", ".yaml", ".yml", ".txt")
      for number, line in enumerate(path.read_text().splitlines(), 1)
      if OUTSIDE in line
  ] + [f"README.md:{n}" for n, line in enumerate(
      (ROOT / "README.md").read_text().splitlines(), 1) if OUTSIDE in line]
  assert cited == []
