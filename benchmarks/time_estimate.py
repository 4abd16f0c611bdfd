"""The promotion's time estimate against its wall time, on 1 and 2 workers.

For each finished search given (by default a fresh digits demo search of
search_spaces/digits-demo.yaml), and each worker count, this copies the
search and its MLflow store to a scratch folder (a trial is promoted at most
once per store), runs `tan-tune promote` there, and times it from the line
of the plan that gives the estimate to the command's exit: the part of the
command the estimate covers (the plan itself, with its probe, comes before).
Prints the estimate's pieces, the measured time and their ratio.

Run: .venv/bin/python benchmarks/time_estimate.py
     [--search runs/e2e/fashion-mnist-cnn --tracking-uri sqlite:///...]
     [--workers 1 2] [--smoke]
"""

import argparse
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import _smoke

_ROOT = pathlib.Path(__file__).resolve().parent.parent
_TAN_TUNE = str(pathlib.Path(sys.executable).parent / "tan-tune")
_MARK = "estimated wall time: "


def _digits_search(scratch: pathlib.Path,
                   smoke: bool) -> tuple[pathlib.Path, str]:
  store = scratch / "digits"
  uri = f"sqlite:///{store}/mlflow.db"
  space = _ROOT / "search_spaces" / "digits-demo.yaml"
  if smoke:
    space = _smoke.shrunken_copy(space, scratch)
  subprocess.run([_TAN_TUNE, "search", str(space),
                  "--storage", str(store), "--tracking-uri", uri],
                 check=True, cwd=_ROOT, stdout=subprocess.DEVNULL)
  return store / "digits-demo", uri


def _promote(search: pathlib.Path, uri: str, workers: int,
             scratch: pathlib.Path) -> tuple[str, float]:
  """Promotes a copy of `search`; returns the estimate line and the seconds
  from it to the exit."""
  store = pathlib.Path(uri.removeprefix("sqlite:///")).parent
  copy = scratch / f"workers-{workers}"
  shutil.copytree(store, copy)
  command = [_TAN_TUNE, "promote", str(copy / search.relative_to(store)),
             "--tracking-uri", f"sqlite:///{copy}/mlflow.db",
             "--workers", str(workers), "--new-ledger"]
  process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True,
                             cwd=_ROOT)
  estimate, start = "", None
  for line in process.stdout:
    if line.startswith(_MARK):
      estimate, start = line.strip(), time.perf_counter()
  if process.wait() or start is None:
    raise SystemExit(f"{' '.join(command)} failed ({process.returncode})")
  return estimate, time.perf_counter() - start


def _seconds(text: str) -> float:
  minutes, seconds = text.removesuffix("s").split("m")
  return 60 * int(minutes) + int(seconds)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--search", type=pathlib.Path,
                      help="a finished search directory (default: a fresh"
                      " digits demo search)")
  parser.add_argument("--tracking-uri", help="its sqlite MLflow store")
  parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
  parser.add_argument("--smoke", action="store_true",
                      help="a one-trial digits search of 4 steps, promoted on"
                      " one worker: a check that it runs")
  args = parser.parse_args()
  if args.smoke:
    args.workers = [1]
  with tempfile.TemporaryDirectory() as folder:
    scratch = pathlib.Path(folder)
    search, uri = ((args.search.resolve(), args.tracking_uri) if args.search
                   else _digits_search(scratch, args.smoke))
    for workers in args.workers:
      estimate, actual = _promote(search, uri, workers, scratch)
      predicted = _seconds(estimate.removeprefix(_MARK).split(" ")[0])
      print(f"{search.name}, {workers} worker(s): estimated {predicted:.0f}"
            f" s, took {actual:.0f} s, estimate / actual"
            f" {predicted / actual:.2f}\n  {estimate}", flush=True)


if __name__ == "__main__":
  main()
