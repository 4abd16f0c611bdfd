"""A full search and promote with fast clipping and with the vmap path.

Runs `tan-tune search` then `tan-tune promote` (2 Ray Train workers) on one
search space twice, once with `clipping: vmap` and once with `clipping: auto`
(fast where it covers the model), in separate storages and MLflow stores, and
prints every trial's selection metric and the promoted run's accuracies side
by side, with the largest difference.

Same seeds: the trials' seeds are public (the space's seed) and Optuna's
first trials are drawn at random from that seed too. The promoted run draws
its sampling and noise seeds from the OS's secret source, so that no two
promoted runs can be compared; for this experiment only, both promote
processes (and their Ray workers, through a `sitecustomize` on PYTHONPATH)
get the same fixed "secret". Those two runs are not private, and their
stores are scratch: nothing here is a product run.

Run: .venv/bin/python benchmarks/clipping_equivalence.py
     [--space search_spaces/digits-demo.yaml] [--out DIR]
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

_FIXED_SECRET = '''\
import os
import secrets

if os.environ.get("TAN_TUNE_EXPERIMENT_FIXED_SECRET"):
  # Not private: equal seeds for a side-by-side experiment only.
  secrets.randbits = lambda bits: 0x5EED & ((1 << bits) - 1)
'''
_PROMOTED_METRICS = ("accuracy", "ema_accuracy")  # On the test split.


def _describe(params: dict) -> str:
  """'lr 1.108, momentum 0, ...': a trial's hyper-parameters, short."""
  return ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                   for k, v in sorted(params.items()))


def _run(command: list[str], env: dict[str, str]) -> None:
  print("$", " ".join(command), flush=True)
  subprocess.run(command, check=True, env=env)


def _one(space_path: pathlib.Path, clipping: str, out: pathlib.Path,
         env: dict[str, str]) -> dict:
  """Search and promote with `clipping`; returns trials' and run's numbers."""
  space = yaml.safe_load(space_path.read_text())
  space["clipping"] = clipping
  storage = out / clipping
  storage.mkdir(parents=True)
  path = storage / "space.yaml"
  path.write_text(yaml.safe_dump(space))
  uri = f"sqlite:///{storage / 'mlflow.db'}"
  binary = pathlib.Path(sys.executable).parent / "tan-tune"
  start = time.perf_counter()
  _run([str(binary), "search", str(path), "--storage", str(storage),
        "--tracking-uri", uri], env)
  search_dir = storage / space["name"]
  _run([str(binary), "promote", str(search_dir), "--workers", "2",
        "--new-ledger"],
       {**env, "TAN_TUNE_EXPERIMENT_FIXED_SECRET": "1"})
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
  args = parser.parse_args()
  out = pathlib.Path(args.out or tempfile.mkdtemp(prefix="clipping-eq-"))
  site = out / "site"
  site.mkdir(parents=True, exist_ok=True)
  (site / "sitecustomize.py").write_text(_FIXED_SECRET)
  env = {**os.environ, "PYTHONPATH": os.pathsep.join(
      filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
  results = {c: _one(pathlib.Path(args.space), c, out, env)
             for c in ("vmap", "auto")}
  vmap, fast = results["vmap"], results["auto"]
  print(f"\nspace {args.space}; promoted run's clipping: vmap run"
        f" {vmap['clipping']!r}, auto run {fast['clipping']!r}")
  print(f"{'trial':80s} {'vmap':>8s} {'fast':>8s}")
  differences = []
  for params, value in sorted(vmap["trials"].items()):
    other = fast["trials"].get(params)
    differences.append(abs(value - other) if other is not None else None)
    print(f"{params:80s} {value:8.4f} "
          f"{other if other is None else format(other, '8.4f')}")
  for metric in _PROMOTED_METRICS:
    a, b = vmap["promoted"][metric], fast["promoted"][metric]
    differences.append(abs(a - b) if None not in (a, b) else None)
    print(f"{'promoted run, test ' + metric:80s} {a:8.4f} {b:8.4f}")
  print(f"same trials: {vmap['trials'].keys() == fast['trials'].keys()};"
        f" largest difference: {max(d for d in differences if d is not None)}"
        f"; missing: {sum(d is None for d in differences)}")
  print(f"wall: vmap {vmap['seconds']:.0f} s, fast {fast['seconds']:.0f} s")


if __name__ == "__main__":
  main()
