"""The docs tell the truth about the package: the README's layout table
names every module, in its stage, and nothing outside the repository is
cited."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "tan_tune"
# What a reader of the repository cannot open: the folder beside it.
OUTSIDE = ".." + "/shared"


def _layout_table() -> dict[str, set[str]]:
  """The README's layout table as {stage folder ('' for the root): modules}."""
  readme = (ROOT / "README.md").read_text()
  table = readme[readme.index("| stage | module | what |"):]
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


def test_the_readme_layout_names_every_module_in_its_stage():
  assert _layout_table() == _package_modules()


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
