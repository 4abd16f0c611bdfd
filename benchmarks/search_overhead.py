"""The driver's overhead per trial: `tan-tune search` against `run_trial`.

One search of the digits demo space, one trial at a time, as a user runs it
(a `tan-tune search` process: its own local Ray, Optuna, MLflow in sqlite, a
checkpoint per evaluation). Its trials' MLflow runs say when each started
and ended. Then the same configurations are trained back to back with
`trial.run_trial` in this process, on the threads Ray gives a trial.

    per trial = ((end of the last trial - end of the first trial)
                 - run_trial time of trials 2..N) / (N - 1)

is what each further trial costs beyond its training (the target: at most
1 s). The first trial also starts the worker that the others reuse; that and
the rest of a search's fixed cost (imports, a local Ray, the MLflow parent
run, the plots) are printed beside it.

Run: .venv/bin/python benchmarks/search_overhead.py [--trials 8] [--smoke]
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

from mlflow import MlflowClient
import torch
import yaml

from tan_tune.search import resolved as resolved_lib
from tan_tune.search import search_files
from tan_tune.search import trial_record
from tan_tune.training import trial

DEMO = pathlib.Path(__file__).parent.parent / "search_spaces" / "digits-demo.yaml"


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--trials", type=int, default=8, help="N >= 2")
  parser.add_argument("--smoke", action="store_true",
                      help="two trials of 4 steps: a check that it runs")
  args = parser.parse_args()
  if args.smoke:
    args.trials = 2
  with tempfile.TemporaryDirectory() as folder:
    folder = pathlib.Path(folder)
    spec = yaml.safe_load(DEMO.read_text())
    spec.update(name="overhead", num_trials=args.trials, max_concurrent=1)
    if args.smoke:  # Two evaluations, so a checkpoint is still reused.
      spec["reference"]["steps"], spec["eval_every"] = 4, 2
    path = folder / "overhead.yaml"
    path.write_text(yaml.safe_dump(spec))
    uri = f"sqlite:///{folder}/mlflow.db"
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "tan_tune.cli", "search", str(path),
         "--storage", str(folder / "runs"), "--tracking-uri", uri],
        check=True, stdout=subprocess.DEVNULL,
        env=dict(os.environ, RAY_AUTH_MODE="disabled"))
    whole = time.perf_counter() - start
    rows = json.loads(
        (folder / "runs" / "overhead" / search_files.LEADERBOARD_FILE).read_text())
    client = MlflowClient(uri)
    runs = sorted(((client.get_run(row["mlflow_run_id"]).info, row["params"])
                   for row in rows), key=lambda run: run[0].start_time)
    resolved = resolved_lib.load(folder / "runs" / "overhead")
    space = resolved.space
    # Ray runs a trial of `resources.cpu` CPUs with that many threads.
    torch.set_num_threads(max(1, int(space.resources.cpu)))
    seconds = []
    for _, params in runs:
      began = time.perf_counter()
      trial.run_trial(trial_record.build(resolved, params).config)
      seconds.append(time.perf_counter() - began)
  first_end, last_end = runs[0][0].end_time, runs[-1][0].end_time
  span = (last_end - first_end) / 1000
  per_trial = (span - sum(seconds[1:])) / (len(runs) - 1)
  print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs,"
        f" python {platform.python_version()}, torch {torch.__version__}")
  print(f"{len(runs)} digits trials (B = 64, S = {space.reference.steps}),"
        " one at a time")
  print(f"{'the whole search':<38} {whole:7.1f} s")
  print(f"{'trials 2..N, first end to last end':<38} {span:7.1f} s")
  print(f"{'run_trial, trials 2..N':<38} {sum(seconds[1:]):7.1f} s")
  print(f"{'overhead per further trial':<38} {per_trial:7.2f} s")
  print(f"{'fixed cost of a search':<38}"
        f" {whole - sum(seconds) - (len(runs) - 1) * per_trial:7.1f} s"
        " (imports, local Ray, the first worker, MLflow parent run, plots)")


if __name__ == "__main__":
  main()
