"""The docs tell the truth about the package: the architecture's module
table names every module, in its stage, the paths it names exist, every
link of the README and the docs resolves, the README stays short, and
nothing outside the repository is cited."""

import pathlib
import re
import subprocess
import sys

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


def test_the_architectures_extension_examples_register_what_they_say():
  """Its code blocks, run in order in a fresh process, as a user's file
  would be: each kind's name then parses to what the example registered."""
  blocks = re.findall(r"```python\n(.*?)```", ARCHITECTURE.read_text(),
                      re.DOTALL)
  check = """
from tan_tune.privacy import accountant_registry, samplers
from tan_tune.search import schedulers, search_algorithms, tuning_mode
from tan_tune.training import clipping, models
assert samplers.parse("bernoulli-poisson") == "bernoulli-poisson"
assert accountant_registry.named("pld-coins").name == "pld-coins"
assert models.ModelConfig("tiny-mlp", width=2).width == 2
assert tuning_mode.named("first-two").name == "first-two"
assert clipping.ENGINES["ghost"].name == "ghost"
assert search_algorithms.named("qmc").name == "qmc"
assert schedulers.named("median").name == "median"
"""
  done = subprocess.run([sys.executable, "-c", "\n".join(blocks) + check],
                        capture_output=True, text=True, cwd=ROOT,
                        check=False)
  assert len(blocks) == 5 and done.returncode == 0, done.stderr[-2000:]


def _anchors(page: pathlib.Path) -> set[str]:
  """The anchors of a Markdown page's headings, as GitHub makes them
  (lower case, punctuation dropped, spaces to '-', repeats numbered)."""
  found, seen = set(), {}
  text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
  for heading in re.findall(r"^#{1,6} (.*)$", text, flags=re.M):
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
    count = seen.get(slug, 0)
    found.add(slug if count == 0 else f"{slug}-{count}")
    seen[slug] = count + 1
  return found


def test_every_link_of_the_readme_and_the_docs_resolves():
  """Each relative link names a file that exists and, into a Markdown page,
  one of its headings."""
  pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")),
           *sorted((ROOT / "examples").rglob("*.md")),
           *sorted((ROOT / "cluster").rglob("*.md"))]
  broken = []
  for page in pages:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
      if re.match(r"[a-z]+:", target):
        continue  # A web address: not this repository's to check.
      name, _, anchor = target.partition("#")
      linked = (page.parent / name).resolve() if name else page
      if not linked.exists() or (anchor and linked.suffix == ".md"
                                 and anchor not in _anchors(linked)):
        broken.append(f"{page.relative_to(ROOT)}: {target}")
  assert broken == []


def test_the_readme_fits_on_a_few_screens():
  assert len((ROOT / "README.md").read_bytes()) <= 12_000
