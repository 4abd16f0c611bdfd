"""The driver's overhead per trial: N trials via `tan-tune search` vs `run_trial`.

Both sides train the same N configurations of the digits demo space (Optuna's
first N proposals, seed 0): first through the search driver (Ray Tune, Optuna,
MLflow, checkpoints) with one trial at a time, then back to back with
`trial.run_trial` in this process, with the threads Ray gives a trial. One run, side by side; the difference per
trial is what the driver costs (Ray start-up included, paid once per search).

Run: .venv/bin/python benchmarks/search_overhead.py [--trials 4]
"""

import argparse
import os
import pathlib
import platform
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


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--trials", type=int, default=4)
  args = parser.parse_args()
  os.environ.setdefault("RAY_AUTH_MODE", "disabled")
  with tempfile.TemporaryDirectory() as folder:
    folder = pathlib.Path(folder)
    spec = yaml.safe_load(DEMO.read_text())
    spec.update(name="overhead", num_trials=args.trials, max_concurrent=1)
    space_path = folder / "space.yaml"
    space_path.write_text(yaml.safe_dump(spec))

    start = time.perf_counter()
    result = search.run_search(space_path, search.SearchOptions(
        storage=folder / "runs", verbose=0,
        tracking_uri=f"sqlite:///{folder}/mlflow.db",
    ))
    driver_seconds = time.perf_counter() - start

    space = search_space.load_search_space(space_path)
    n = datasets.load_dataset(space.dataset).num_train
    # Ray runs a trial of `resources.cpu` CPUs with that many threads.
    torch.set_num_threads(max(1, int(space.resources.cpu)))
    start = time.perf_counter()
    for row in result.leaderboard:
      config, _ = trials.trial_config(space, row["params"], n)
      trial.run_trial(config)
    direct_seconds = time.perf_counter() - start

  print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs,"
        f" python {platform.python_version()}")
  print(f"{args.trials} digits trials (B = 64, S = 100), one at a time")
  print(f"{'through the driver':<22} {driver_seconds:8.1f} s")
  print(f"{'run_trial back to back':<22} {direct_seconds:8.1f} s")
  print(f"{'driver overhead':<22} {(driver_seconds - direct_seconds) / args.trials:8.1f}"
        f" s per trial ({driver_seconds / direct_seconds:.1f}x)")


if __name__ == "__main__":
  main()
