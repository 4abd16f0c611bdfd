"""A full search and promote, twice, compared number for number.

Runs `tan-tune search` then `tan-tune promote` (2 Ray Train workers) on one
search space twice, in separate storages and MLflow stores, and prints every
trial's selection metric and the promoted run's accuracies side by side, with
the largest difference. By default the two runs differ in their clipping:
`clipping: vmap` against `clipping: auto` (fast where it covers the model).
With `--before REV` both use the file's clipping and the first runs the code
of commit REV (a git worktree): a refactoring must leave every number as it
was.

Same seeds: the trials' seeds are public (the space's seed) and Optuna's
first trials are drawn at random from that seed too. The promoted run draws
its sampling and noise seeds from the OS's secret source, so that no two
promoted runs can be compared; for this experiment only, both promote
processes (and their Ray workers, through a `sitecustomize` on PYTHONPATH)
get the same fixed "secret". Those two runs are not private, and their
stores are scratch: nothing here is a product run.

Run: .venv/bin/python benchmarks/clipping_equivalence.py
     [--space search_spaces/digits-demo.yaml] [--out DIR] [--before REV]
     [--smoke]
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

from mlflow import MlflowClient
import yaml

import _smoke

_FIXED_SECRET = '''\
import os
import secrets

if os.environ.get("TAN_TUNE_EXPERIMENT_FIXED_SECRET"):
  # Not private: equal seeds for a side-by-side experiment only.
  secrets.randbits = lambda bits: 0x5EED & ((1 << bits) - 1)
'''
_PROMOTED_METRICS = ("accuracy", "ema_accuracy")  # On the test split.
_ROOT = pathlib.Path(__file__).resolve().parent.parent


def _describe(params: dict) -> str:
  """'lr 1.108, momentum 0, ...': a trial's hyper-parameters, short."""
  return ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                   for k, v in sorted(params.items()))


def _run(command: list[str], env: dict[str, str], cwd: pathlib.Path) -> None:
  # Run from a scratch folder: `python -m` imports from its working folder.
  print("$", " ".join(command), flush=True)
  subprocess.run(command, check=True, env=env, cwd=cwd)


def _one(space_path: pathlib.Path, clipping: str | None, out: pathlib.Path,
         env: dict[str, str], label: str, smoke: bool) -> dict:
  """Search and promote (with `clipping` unless None) under the tan_tune
  that `env` imports; returns trials' and run's numbers."""
  space = yaml.safe_load(space_path.read_text())
  if clipping:
    space["clipping"] = clipping
  if smoke:
    space = _smoke.shrink(space)
  storage = out / label
  storage.mkdir(parents=True)
  path = storage / "space.yaml"
  path.write_text(yaml.safe_dump(space))
  uri = f"sqlite:///{storage / 'mlflow.db'}"
  command = [sys.executable, "-m", "tan_tune.cli"]
  start = time.perf_counter()
  _run([*command, "search", str(path), "--storage", str(storage),
        "--tracking-uri", uri], env, storage)
  search_dir = storage / space["name"]
  _run([*command, "promote", str(search_dir), "--workers",
        "1" if smoke else "2",
        "--new-ledger"],
       {**env, "TAN_TUNE_EXPERIMENT_FIXED_SECRET": "1"}, storage)
  seconds = time.perf_counter() - start
  board = json.loads((search_dir / "leaderboard.json").read_text())
  trials = {_describe(t["params"]): t[space["metric"]] for t in board}
  (promotion,) = (search_dir / "promote").glob("*/promotion.json")
  run_id = json.loads(promotion.read_text())["run_id"]
  metrics = MlflowClient(uri).get_run(run_id).data.metrics
  return {"trials": trials, "seconds": seconds,
          "promoted": {m: metrics.get(m) for m in _PROMOTED_METRICS},
          "clipping": MlflowClient(uri).get_run(run_id).data.tags.get(
              "tan_tune.clipping")}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--space", default="search_spaces/digits-demo.yaml")
  parser.add_argument("--out", default=None,
                      help="scratch directory (default: a new temporary one)")
  parser.add_argument("--before", default=None,
                      help="compare the code of this commit with this"
                           " checkout, instead of vmap with fast clipping")
  parser.add_argument("--smoke", action="store_true",
                      help="one trial of 4 steps, promoted on one worker: a"
                      " check that it runs")
  args = parser.parse_args()
  if args.out:
    _sides(pathlib.Path(args.out), args)
  else:  # A scratch folder, deleted at the end.
    with tempfile.TemporaryDirectory(prefix="clipping-eq-") as out:
      _sides(pathlib.Path(out), args)


def _sides(out: pathlib.Path, args: argparse.Namespace) -> None:
  """Both runs in `out`, then their comparison."""
  site = out / "site"
  site.mkdir(parents=True, exist_ok=True)
  (site / "sitecustomize.py").write_text(_FIXED_SECRET)
  space = pathlib.Path(args.space).resolve()
  if args.before:
    before = out / "before-code"
    subprocess.run(["git", "-C", str(_ROOT), "worktree", "add", "--detach",
                    str(before), args.before], check=True)
    try:
      runs = {"before": _one(space, None, out, _env(site, before), "before",
                             args.smoke),
              "after": _one(space, None, out, _env(site, _ROOT), "after",
                            args.smoke)}
    finally:
      subprocess.run(["git", "-C", str(_ROOT), "worktree", "remove",
                      "--force", str(before)], check=False)
  else:
    runs = {c: _one(space, c, out, _env(site, _ROOT), c, args.smoke)
            for c in ("vmap", "auto")}
  (first, a), (second, b) = runs.items()
  _compare(args.space, first, a, second, b)


def _env(site: pathlib.Path, code: pathlib.Path) -> dict[str, str]:
  """Imports tan_tune from `code`, with the fixed secret's hook."""
  return {**os.environ, "PYTHONPATH": os.pathsep.join(
      filter(None, [str(site), str(code), os.environ.get("PYTHONPATH")]))}


def _compare(space: str, first: str, a: dict, second: str, b: dict) -> None:
  print(f"\nspace {space}; promoted run's clipping: {first} run"
        f" {a['clipping']!r}, {second} run {b['clipping']!r}")
  print(f"{'trial':80s} {first:>8s} {second:>8s}")
  differences = []
  for params, value in sorted(a["trials"].items()):
    other = b["trials"].get(params)
    differences.append(abs(value - other) if other is not None else None)
    print(f"{params:80s} {value:8.4f} "
          f"{other if other is None else format(other, '8.4f')}")
  for metric in _PROMOTED_METRICS:
    x, y = a["promoted"][metric], b["promoted"][metric]
    differences.append(abs(x - y) if None not in (x, y) else None)
    print(f"{'promoted run, test ' + metric:80s} {x:8.4f} {y:8.4f}")
  print(f"same trials: {a['trials'].keys() == b['trials'].keys()};"
        f" largest difference: {max(d for d in differences if d is not None)}"
        f"; missing: {sum(d is None for d in differences)}")
  print(f"wall: {first} {a['seconds']:.0f} s, {second} {b['seconds']:.0f} s")

if __name__ == "__main__":
  main()
