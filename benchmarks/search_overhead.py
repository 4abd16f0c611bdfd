"""The driver's overhead per trial: `tan-tune search` against `run_trial`.

Two searches of the digits demo space, one trial at a time, each a fresh
`tan-tune search` process as a user runs it (its own local Ray, Optuna,
MLflow in sqlite, a checkpoint per evaluation): one of N trials and one of 2N.
Optuna's proposals are seeded, so the 2N-trial search runs the N-trial one's
trials and N more. Then all 2N configurations are trained back to back with
`trial.run_trial` in this process, on the threads Ray gives a trial.

    per trial, marginal = ((T_2N - T_N) - direct(trials N+1..2N)) / N

is what each further trial costs beyond its training: the figure the target
(at most 1 s) is about. The fixed cost of a search (Python imports, a local
Ray start, the MLflow parent run, the plots) is T_N - direct(trials 1..N)
minus N times that, printed beside it.

Run: .venv/bin/python benchmarks/search_overhead.py [--trials 4]
"""

import argparse
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import time

import torch
import yaml

from tan_tune.search import driver as search
from tan_tune.search import space as search_space
from tan_tune.search import trials
from tan_tune.training import datasets
from tan_tune.training import trial

DEMO = pathlib.Path(__file__).parent.parent / "search_spaces" / "digits-demo.yaml"


def _search(folder: pathlib.Path, name: str, num_trials: int) -> float:
  """Wall seconds of one `tan-tune search` process."""
  spec = yaml.safe_load(DEMO.read_text())
  spec.update(name=name, num_trials=num_trials, max_concurrent=1)
  path = folder / f"{name}.yaml"
  path.write_text(yaml.safe_dump(spec))
  start = time.perf_counter()
  subprocess.run(
      [sys.executable, "-m", "tan_tune.cli", "search", str(path), "--storage",
       str(folder / "runs"), "--tracking-uri", f"sqlite:///{folder}/{name}.db"],
      check=True, stdout=subprocess.DEVNULL,
      env=dict(os.environ, RAY_AUTH_MODE="disabled"))
  return time.perf_counter() - start


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--trials", type=int, default=4, help="N")
  args = parser.parse_args()
  n = args.trials
  with tempfile.TemporaryDirectory() as folder:
    folder = pathlib.Path(folder)
    short = _search(folder, "short", n)
    long = _search(folder, "long", 2 * n)
    def params(name):
      return [row["params"] for row in json.loads(
          (folder / "runs" / name / search.LEADERBOARD_FILE).read_text())]

    earlier = params("short")
    # Seeded proposals: the long search repeats the short one's trials.
    later = [p for p in params("long") if p not in earlier]
    assert len(later) == n, "the searches' first N trials differ"
    space = search_space.load_search_space(folder / "long.yaml")
    size = datasets.load_dataset(space.dataset).num_train
    # Ray runs a trial of `resources.cpu` CPUs with that many threads.
    torch.set_num_threads(max(1, int(space.resources.cpu)))

    def direct(group):
      start = time.perf_counter()
      for p in group:
        trial.run_trial(trials.trial_config(space, p, size)[0])
      return time.perf_counter() - start

    first, second = direct(earlier), direct(later)
  marginal = ((long - short) - second) / n
  print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs,"
        f" python {platform.python_version()}, torch {torch.__version__}")
  print(f"digits trials (B = 64, S = {space.reference.steps}), one at a time;"
        f" N = {n}")
  print(f"{'search of N trials':<34} {short:7.1f} s")
  print(f"{'search of 2N trials':<34} {long:7.1f} s")
  print(f"{'run_trial, trials 1..N':<34} {first:7.1f} s")
  print(f"{'run_trial, trials N+1..2N':<34} {second:7.1f} s")
  print(f"{'overhead per further trial':<34} {marginal:7.2f} s")
  print(f"{'fixed cost of a search':<34} {short - first - n * marginal:7.1f} s"
        " (imports, local Ray, MLflow parent run, plots)")


if __name__ == "__main__":
  main()
