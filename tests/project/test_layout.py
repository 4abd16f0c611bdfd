"""The package is a pipeline, and its imports only go downwards.

    errors, config_io, mlflow_store, ray_cluster  <  privacy/  <  training/
      <  release/  <  ledger/  <  registry/  <  search/  <  promote/  <  api/
      <  cli/

A module may import its own stage and the stages below it. `cli/` is the
top: nothing outside it imports it, and inside it only the entry point
(`main.py`, `__main__.py`) imports the subcommand modules, which share
`args.py` (and `privacy_tables.py`, the calculator's printing) alone. It is
a thin layer over `api/`: of the package it imports `tan_tune.api`,
`console` and `errors` alone, and none of the libraries the stages wrap
(Ray, MLflow, torch, Optuna, Opacus).
Inside a stage, modules import each other without a circle, counting the
imports made for type checking only.
"""

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "tan_tune"
STAGES = ("", "privacy", "training", "release", "ledger", "registry",
          "search", "promote", "api", "cli")
CLI_ENTRY_POINTS = ("tan_tune.cli.main", "tan_tune.cli.__main__")
CLI_SHARED = ("tan_tune.cli.args", "tan_tune.cli.privacy_tables")
# What cli/ may import of the package besides its own modules.
CLI_LAYER_OVER = ("tan_tune.api", "tan_tune.console", "tan_tune.errors")
# The libraries the stages wrap, which cli/ reaches through the API alone.
WRAPPED = ("ray", "mlflow", "torch", "optuna", "opacus")


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


def circles(package: pathlib.Path = PACKAGE) -> list[list[str]]:
  """The import circles among the package's modules (each one's modules,
  sorted), found as the graph's strongly connected components."""
  modules = {_module_name(path, package): path
             for path in package.rglob("*.py")}
  graph = {}
  for name, path in modules.items():
    edges = set()
    for imported in _imports(path):
      # `from a.b import c` is the module a.b.c, or the name c of a.b.
      module = imported if imported in modules else imported.rpartition(".")[0]
      if module in modules and module != name:
        edges.add(module)
    graph[name] = edges
  return sorted(sorted(c) for c in _components(graph) if len(c) > 1)


def _components(graph: dict[str, set[str]]) -> list[set[str]]:
  """Tarjan's strongly connected components, without recursion."""
  index, low, on_stack, stack, found = {}, {}, set(), [], []
  for root in graph:
    if root in index:
      continue
    work = [(root, iter(sorted(graph[root])))]
    index[root] = low[root] = len(index)
    stack.append(root)
    on_stack.add(root)
    while work:
      node, edges = work[-1]
      child = next(edges, None)
      if child is None:
        work.pop()
        if work:
          low[work[-1][0]] = min(low[work[-1][0]], low[node])
        if low[node] == index[node]:
          component = set()
          while True:
            member = stack.pop()
            on_stack.discard(member)
            component.add(member)
            if member == node:
              break
          found.append(component)
      elif child not in index:
        index[child] = low[child] = len(index)
        stack.append(child)
        on_stack.add(child)
        work.append((child, iter(sorted(graph[child]))))
      elif child in on_stack:
        low[node] = min(low[node], index[child])
  return found


def bypasses(package: pathlib.Path = PACKAGE) -> list[str]:
  """'importer -> imported' for every import of cli/ that goes around the
  API: a stage's module, or a library a stage wraps."""
  found = []
  for path in sorted((package / "cli").glob("*.py")):
    importer = _module_name(path, package)
    tree = ast.parse(path.read_text())
    libraries = [alias.name for node in ast.walk(tree)
                 if isinstance(node, ast.Import) for alias in node.names]
    libraries += [node.module for node in ast.walk(tree)
                  if isinstance(node, ast.ImportFrom) and node.module]
    found += [f"{importer} -> {name}" for name in libraries
              if name.split(".")[0] in WRAPPED]
    found += [f"{importer} -> {imported}" for imported in _imports(path)
              if _stage(imported) != "cli" and not any(
                  imported == allowed or imported.startswith(f"{allowed}.")
                  for allowed in CLI_LAYER_OVER)]
  return found


def test_imports_only_go_downwards():
  assert violations() == []


def test_the_cli_reaches_the_package_through_the_api_alone():
  assert bypasses() == []


@pytest.mark.parametrize("line, bypass", [
    ("from tan_tune.search import driver", "tan_tune.search.driver"),
    ("from tan_tune import mlflow_store", "tan_tune.mlflow_store"),
    ("import tan_tune.privacy.accounting", "tan_tune.privacy.accounting"),
    ("from mlflow import MlflowClient", "mlflow"),
    ("import ray.tune", "ray.tune"),
])
def test_an_import_around_the_api_is_caught(tmp_path, line, bypass):
  copy = _copy_with(tmp_path, "cli/promote.py", line)
  assert bypasses(copy) == [f"tan_tune.cli.promote -> {bypass}"]


def test_the_api_and_its_modules_are_the_cli_s_to_import(tmp_path):
  copy = _copy_with(tmp_path, "cli/promote.py",
                    "from tan_tune.api import calculator\n"
                    "from tan_tune.errors import ConfigError")
  assert bypasses(copy) == []


def test_no_import_circle_inside_a_stage():
  assert circles() == []


@pytest.mark.parametrize("module, line", [
    ("privacy/triplet.py", "from tan_tune.training import trial"),
    ("training/trial.py", "from tan_tune.search import space"),
    ("search/driver.py", "from tan_tune.promote import plan"),
    ("promote/run.py", "from tan_tune.cli import args"),
    ("cli/search.py", "from tan_tune.cli import promote"),
])
def test_an_upward_or_sideways_import_is_caught(tmp_path, module, line):
  """The check itself, on a copy of the package with one bad import added."""
  copy = _copy_with(tmp_path, module, line)
  [violation] = violations(copy)
  assert violation.startswith(module[:-3].replace("/", ".").join(
      ["tan_tune.", ""]))


@pytest.mark.parametrize("module, line, circle", [
    ("training/run_state.py",
     "if TYPE_CHECKING:\n  from tan_tune.training import trial",
     ["tan_tune.training.run_state", "tan_tune.training.trial"]),
    ("training/trial_config.py",
     "from tan_tune.training.trial import TrialResult",
     ["tan_tune.training.run_state", "tan_tune.training.trial",
      "tan_tune.training.trial_config"]),
])
def test_a_circle_inside_a_stage_is_caught(tmp_path, module, line, circle):
  copy = _copy_with(tmp_path, module, line)
  assert violations(copy) == []  # Within one stage: only a circle is wrong.
  assert circles(copy) == [circle]


def _copy_with(tmp_path: pathlib.Path, module: str,
               line: str) -> pathlib.Path:
  """A copy of the package with `line` added to `module`."""
  copy = tmp_path / "tan_tune"
  for path in PACKAGE.rglob("*.py"):
    target = copy / path.relative_to(PACKAGE)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(path.read_text())
  changed = copy / module
  changed.write_text(changed.read_text() + f"\n{line}\n")
  return copy


def test_every_stage_says_what_it_is_and_what_it_may_import():
  for stage in STAGES[1:]:
    doc = ast.get_docstring(ast.parse((PACKAGE / stage / "__init__.py")
                                      .read_text()))
    assert doc and "import" in doc, stage


# The private runs' parts: each a cohesive whole, none a bag of strangers.
PRIVATE_RUN_PARTS = ("release", "ledger", "registry")
# The adapters to MLflow and Ray: they carry data, and decide nothing.
ADAPTERS = ("tan_tune.mlflow_store", "tan_tune.ray_cluster")


def strangers(package: pathlib.Path = PACKAGE) -> list[str]:
  """The modules of a private runs' part that use none of their siblings
  and that none of them uses (by import, or by path: a loader copied into
  a model is named, never imported)."""
  found = []
  for part in PRIVATE_RUN_PARTS:
    paths = {p.stem: p for p in (package / part).glob("*.py")
             if p.stem != "__init__"}
    prefix = f"tan_tune.{part}."
    uses = {name: {i[len(prefix):].split(".")[0] for i in _imports(path)
                   if i.startswith(prefix)}
                  | {other for other in paths
                     if f'"{other}.py"' in path.read_text()}
            for name, path in paths.items()}
    found += [f"{part}/{name}.py" for name in sorted(paths)
              if not (uses[name] - {name}) and not any(
                  name in used for other, used in uses.items()
                  if other != name)]
  return found


def test_each_private_runs_part_holds_together():
  assert strangers() == []


def test_a_stranger_in_a_part_is_caught(tmp_path):
  copy = _copy_with(tmp_path, "ledger/ledger.py", "")
  (copy / "ledger" / "loose.py").write_text("import os\n")
  assert strangers(copy) == ["ledger/loose.py"]


def test_the_adapters_decide_nothing():
  """MLflow's and Ray's adapters import no policy: nothing of the
  package's but its errors and config files."""
  for module in ADAPTERS:
    path = PACKAGE / f"{module.split('.')[-1]}.py"
    assert all(i.split(".")[:2] in (["tan_tune", "errors"],
                                    ["tan_tune", "config_io"])
               for i in _imports(path)), module


# The tests' folders: one per stage (`core` for the root's modules), whole
# runs across stages, the repository's own checks, and extensions written
# as a user would.
TEST_FOLDERS = {"core", *STAGES[1:], "e2e", "project", "extensions"}


def test_the_tests_are_arranged_like_the_package():
  tests = PACKAGE.parent / "tests"
  assert {p.parent.name for p in tests.rglob("test_*.py")} <= TEST_FOLDERS
  assert sorted(p.name for p in tests.glob("test_*.py")) == []


def test_no_module_is_over_400_lines():
  long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
          if (n := len(p.read_text().splitlines())) > 400}
  assert long == {}


# What the package may read from the environment: what users, Ray and torch
# set.
_ENVIRONMENT = {"RAY_ADDRESS", "TMPDIR", "TORCHINDUCTOR_CACHE_DIR",
                "TAN_TUNE_LEDGER_KEY_FILE",
                "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT",
                "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD",
                "MLFLOW_TRACKING_TOKEN"}


def environment_reads(package: pathlib.Path = PACKAGE) -> list[str]:
  """'module: name' for every read of os.environ or os.getenv whose key is
  not one users set (`_ENVIRONMENT`), or not a literal at all."""
  found = []
  for path in sorted(package.rglob("*.py")):
    for node in ast.walk(ast.parse(path.read_text())):
      key = None
      if isinstance(node, ast.Subscript) and _is_environ(node.value):
        key = node.slice
      elif isinstance(node, ast.Call) and (
          (isinstance(node.func, ast.Attribute) and node.func.attr in (
              "get", "pop", "setdefault") and _is_environ(node.func.value))
          or (isinstance(node.func, ast.Attribute)
              and node.func.attr == "getenv")) and node.args:
        key = node.args[0]
      if key is None:
        continue
      name = key.value if isinstance(key, ast.Constant) else ast.unparse(key)
      if name not in _ENVIRONMENT:
        found.append(f"{path.relative_to(package)}: {name}")
  return found


def _is_environ(node: ast.AST) -> bool:
  return isinstance(node, ast.Attribute) and node.attr == "environ"


def test_the_package_reads_no_test_switch_from_the_environment():
  """A test hook read from the environment ships to every user: one that
  wrote a private run's secret seeds to a file did. Tests spy from their
  own code (tests/secret_spy)."""
  assert environment_reads() == []


def test_a_test_switch_in_the_package_is_caught(tmp_path):
  copy = _copy_with(tmp_path, "training/seeds.py",
                    'import os\nLOG = os.environ.get("TAN_TUNE_TEST_LOG")')
  assert environment_reads(copy) == ["training/seeds.py: TAN_TUNE_TEST_LOG"]
