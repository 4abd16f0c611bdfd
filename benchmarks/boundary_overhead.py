"""What the private-run boundary costs: wall time before and after.

The same two commands, as a user runs them, under the code before the
boundary (a git worktree of `--before`, default the last commit without it)
and under this checkout, interleaved (before, after, before, after, ...) so
that the machine's drift hits both alike:

- a private random search of digits (`search_spaces/digits-private.yaml`
  with a logarithmic number of trials of mean 1.05: almost always one trial,
  so both sides train the same amount; the medians ignore the rare run of
  two);
- a promotion of a one-trial digits search on 2 workers (the search is run
  once, and each promotion gets a fresh copy of its folder and store).

Prints each wall time, the medians and after / before (the target: at
most 1.05). The "before" checkout is compiled once before the first run, so
that no side pays for writing its bytecode.

`--smoke` runs each flow once, under a worktree of HEAD alone (after would
run the same code again): every path the comparison times, with no ratio.
`--search DIR --tracking-uri URI` promotes a copy of a finished one-trial
digits search instead of running one first.

Run: .venv/bin/python benchmarks/boundary_overhead.py [--repeats 3] [--smoke]
     [--search DIR --tracking-uri sqlite:///...]
"""

import argparse
import os
import pathlib
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
BEFORE = "3bf9ebe"  # main before issue 26.


def _space(folder: pathlib.Path, private: bool, smoke: bool) -> pathlib.Path:
  if private:
    space = yaml.safe_load((ROOT / "search_spaces" /
                            "digits-private.yaml").read_text())
    space.update(name="bench-private",
                 trial_count={"distribution": "logarithmic", "mean": 1.05})
  else:
    space = yaml.safe_load((ROOT / "search_spaces" /
                            "digits-demo.yaml").read_text())
    space.update(name="bench", num_trials=1, max_concurrent=1)
  if smoke:
    space["reference"]["steps"], space["eval_every"] = 4, 2
  path = folder / f"{space['name']}.yaml"
  path.write_text(yaml.safe_dump(space))
  return path


def _run(code: pathlib.Path, cwd: pathlib.Path, *argv: str) -> float:
  env = dict(os.environ, PYTHONPATH=str(code), RAY_AUTH_MODE="disabled")
  start = time.perf_counter()
  done = subprocess.run([sys.executable, "-m", "tan_tune.cli", *argv],
                        cwd=cwd, env=env, capture_output=True, text=True,
                        check=False)
  seconds = time.perf_counter() - start
  if done.returncode:
    raise RuntimeError(f"{argv} under {code}: {done.stderr[-2000:]}")
  return seconds


def _flags(code: pathlib.Path, command: str) -> list[str]:
  """`--new-ledger` exists after the boundary only. Read from the command's
  module: asking `--help` imports all of tan_tune, seconds of CPU."""
  module = code / "tan_tune" / "cli" / f"{command}.py"
  return ["--new-ledger"] if '"--new-ledger"' in module.read_text() else []


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--before", default=BEFORE,
                      help="the commit to compare with (default: %(default)s)")
  parser.add_argument("--search", type=pathlib.Path,
                      help="a finished one-trial digits search to promote"
                      " (default: one run here first)")
  parser.add_argument("--tracking-uri", help="its sqlite MLflow store")
  parser.add_argument("--smoke", action="store_true",
                      help="4-step runs, each flow once under a worktree of"
                      " HEAD, promotion on one worker: a check that it runs")
  args = parser.parse_args()
  if args.smoke:
    args.repeats, args.before = 1, "HEAD"
  with tempfile.TemporaryDirectory() as folder:
    folder = pathlib.Path(folder)
    before = folder / "before"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach",
                    str(before), args.before], check=True,
                   capture_output=True)
    subprocess.run([sys.executable, "-m", "compileall", "-q",
                    str(before / "tan_tune")], check=True)
    codes = {"before": before} if args.smoke else {"before": before,
                                                   "after": ROOT}
    try:
      searched, search = _searched(folder, args.search, args.tracking_uri,
                                   args.smoke)
      _compare(folder, searched, search, codes, args.repeats, args.smoke)
    finally:
      subprocess.run(["git", "-C", str(ROOT), "worktree", "remove",
                      "--force", str(before)], check=False)


def _searched(folder: pathlib.Path, search: pathlib.Path | None,
              uri: str | None, smoke: bool) -> tuple[pathlib.Path, str]:
  """A folder holding a finished search and its store, `mlflow.db` (a copy
  of `search`'s, or a new one), and the search's path in it."""
  searched = folder / "searched"
  if search:
    (searched / "runs").mkdir(parents=True)
    shutil.copytree(search, searched / "runs" / search.name)
    shutil.copy(uri.removeprefix("sqlite:///"), searched / "mlflow.db")
    return searched, f"runs/{search.name}"
  searched.mkdir()
  _run(ROOT, searched, "search", str(_space(searched, False, smoke)),
       "--tracking-uri", f"sqlite:///{searched}/mlflow.db")
  return searched, "runs/bench"


def _compare(folder: pathlib.Path, searched: pathlib.Path, search: str,
             codes: dict[str, pathlib.Path], repeats: int,
             smoke: bool) -> None:
  print(f"{platform.processor() or platform.machine()}, {os.cpu_count()}"
        f" cores, {time.strftime('%Y-%m-%d')}")
  times = {(flow, side): [] for flow in ("private search", "promote")
           for side in codes}
  for repeat in range(repeats):
    for side, code in codes.items():
      work = folder / f"{side}-{repeat}"
      shutil.copytree(searched, work)
      times["private search", side].append(_run(
          code, work, "search", str(_space(work, True, smoke)),
          "--tracking-uri", f"sqlite:///{work}/private.db",
          *_flags(code, "search")))
      # The copied store's paths: promote reads the search's own URI.
      times["promote", side].append(_run(
          code, work, "promote", str(work / search), "--workers",
          "1" if smoke else "2", "--tracking-uri",
          f"sqlite:///{work}/mlflow.db",
          *_flags(code, "promote")))
      print(f"  repeat {repeat + 1} {side:>6}: private search"
            f" {times['private search', side][-1]:.1f} s, promote"
            f" {times['promote', side][-1]:.1f} s", flush=True)
  for flow in ("private search", "promote"):
    medians = {side: statistics.median(times[flow, side]) for side in codes}
    ratio = (f", after / before {medians['after'] / medians['before']:.3f}"
             if len(medians) == 2 else " (one side: no ratio)")
    print(f"{flow}: " + ", ".join(f"{side} {seconds:.1f} s" for side, seconds
                                  in medians.items()) + ratio)


if __name__ == "__main__":
  main()
