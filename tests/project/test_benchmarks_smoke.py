"""Every script in benchmarks/ runs: each with `--smoke`, in its own process.

`make bench-smoke` runs it, CI's second step after `make test` (`.ci/run`):
the scripts start Ray, Ray Train and the CLI in processes of their own,
minutes of CPU in all (docs/benchmarks.md), kept out of `make test`.

A benchmark is only run by hand, so without this it rots silently when the
code under it moves. Each script's `--smoke` takes the smallest sizes and
repeats that still go through every path it times; this checks that it exits
0 and prints its figure lines. The scripts are found by listing the folder,
so a new one fails here until it takes `--smoke` and has its lines in
`_FIGURES`.

The scripts run a few at a time: most of their wall time is start-up (Ray,
Ray Train's workers, imports in fresh processes), which overlaps. Three
scripts promote or audit a finished digits search without timing it: they
share one, run first (`_SHARED_SEARCH`), each working on a copy or reading
it only.
"""

import concurrent.futures
import os
import pathlib
import queue
import re
import subprocess
import sys
import threading
import time

import pytest

pytestmark = pytest.mark.benchmarks

_ROOT = pathlib.Path(__file__).resolve().parents[2]
# Modules starting with "_" are the scripts' shared helpers.
_SCRIPTS = sorted(path.name for path in (_ROOT / "benchmarks").glob("[!_]*.py"))
_NUMBER = r"[-+\d.e]+|nan"
# The lines that carry each script's figures (re.MULTILINE), the slowest
# smoke run first.
_FIGURES = {
    "clipping_equivalence.py": [
        r"^promoted run, test ema_accuracy +[\d.]+ +[\d.]+$",
        r"^same trials: True; largest difference: .*; missing: 0$",
        r"^wall: vmap \d+ s, auto \d+ s$"],
    # Under --smoke, one side: the two would run the same code.
    "boundary_overhead.py": [
        rf"^private search: before ({_NUMBER}) s \(one side: no ratio\)$",
        rf"^promote: before ({_NUMBER}) s \(one side: no ratio\)$"],
    "dp_step.py": [
        rf"^dp-cnn +8 +1 {method} +[\w-]+ +1 +\d+ +[\d.]+ +[\d.]+$"
        for method in ("non-private", "tan_tune-fast", "tan_tune-vmap",
                       "opacus-hooks", "opacus-functorch", "opacus-ghost")
    ] + [r"^dp-cnn +8 +2 opacus-hooks +per-copy +1 .*[\d.]+$",
         r"^dp-cnn +8 +2 opacus-ghost +n/a$"],
    "audit.py": [
        r"^\| digits demo, promoted config \| .* \| input \| \d+/\d+ \|",
        r"^\| digits demo, promoted config \| .* \| gradient \| \d+/\d+ \|",
        r"^\| the same, sigma / 10 \| .* \| gradient \| \d+/\d+ \|"],
    "time_estimate.py": [
        r"^digits-demo, 1 worker\(s\): estimated \d+ s, took \d+ s,"
        r" estimate / actual [\d.]+$"],
    "sampling.py": [
        r"^ +poisson +sigma needed +[\d.]+ .* eta-law ratio [\d.]+$",
        r"^ +truncated-poisson .* time x[\d.]+ of Poisson$",
        r"^ +fixed-with-replacement +measured [\d.e+-]+ \+- [\d.e+-]+;"],
    "packing.py": [r"^1 +[\d.]+ +\d+$", r"^4 +[\d.]+ +\d+$",
                   r"^4 per GPU: [\d.]+x the trials per hour of 1$"],
    "search_overhead.py": [
        r"^overhead per further trial +[-\d.]+ s$",
        r"^fixed cost of a search +[-\d.]+ s"],
    "jl.py": [
        r"^dp-cnn +8 +1 tan_tune-jl1 +per-example +1 +\d+ +[\d.]+ +[\d.]+$",
        r"^seed's MNIST +[\d.]+ +[\d.]+ +none +[\d.e+, ]+",
        r"^seed's claim, r = 1 on MNIST.*x the claimed delta\)$",
        r"^exact +pld +[\d.]+ +[\d.]+ +\d+$",
        r"^JL r=10 +pld-jl +[\d.]+ +[\d.]+ +\d+$"],
    "accounting.py": [
        rf"^rdp +({_NUMBER}) +({_NUMBER}) +({_NUMBER}) +({_NUMBER})$",
        rf"^prv +({_NUMBER}) .*({_NUMBER})$",
        r"^pld +.* n/a$",
        rf"^cached eps \+ calibration \(rdp\).*: ({_NUMBER}) us$"],
    "features_once.py": [
        rf"^step every-step ({_NUMBER}) s, once ({_NUMBER}) s,"
        rf" every-step / once ({_NUMBER})$",
        rf"^head weights after 3 steps: largest difference ({_NUMBER});",
        rf"^head step at B = 1448: recorded ({_NUMBER}) s, closed form"
        rf" ({_NUMBER}) s, recorded / closed form ({_NUMBER}); largest"
        rf" difference ({_NUMBER})$"],
    "transfer.py": [
        rf"^Spearman rank correlation ({_NUMBER}), Kendall tau ({_NUMBER})$",
        r"^regret at B_ref of the pick: [-\d.]+$",
        r"^scaling law for the pick, .* predicts [\d.]+ .* actual [\d.]+$"],
    "promote_scaling.py": [
        r"^reference +16 +[\d.]+ +[\d.]+$",
        r"^simulated B_ref/2 +8 +[\d.]+ +[\d.]+ +[\d.]+x +[\d.]+x +2x$"],
    "prediction.py": [
        r"^ +chosen: 18 predictions, mean \|error\| [\d.]+ points",
        r"^laws chosen: "],
    "privacy_curve.py": [
        r"^Fashion-MNIST +1\.000 +\d+\.\d\d% +ours +fashion-mnist-eps1\.yaml",
        r"^MNIST +3\.000 +98\.70% +published +ScatterNet \+ linear",
        r"^picture: .*privacy-curve\.png \(\d+ bytes\)$"],
}
# Scripts at once: beyond this, Ray's start-ups contend for the 2 cores.
_AT_ONCE = 3
_TIMEOUT_S = 900
# The scripts given the shared digits search, and how each is told of it:
# (the search's directory, its MLflow store's URI) -> arguments.
_SHARED_SEARCH = {
    "audit.py": lambda search, uri: ["--digits-search", search],
    "boundary_overhead.py": lambda search, uri: [
        "--search", search, "--tracking-uri", uri],
    "time_estimate.py": lambda search, uri: [
        "--search", search, "--tracking-uri", uri],
}


def _smoke(name: str, *argv: str) -> tuple[subprocess.CompletedProcess, float]:
  """Runs benchmarks/NAME --smoke ARGV from the repository's root."""
  start = time.perf_counter()
  done = subprocess.run(
      [sys.executable, str(_ROOT / "benchmarks" / name), "--smoke", *argv],
      cwd=_ROOT, capture_output=True, text=True, timeout=_TIMEOUT_S,
      env=dict(os.environ, RAY_AUTH_MODE="disabled"), check=False)
  return done, time.perf_counter() - start


def _shared_search(folder: pathlib.Path) -> tuple[str, str]:
  """The digits demo search shrunk as `--smoke` shrinks it, run once with
  `tan-tune search`: its directory and its store's URI."""
  sys.path.insert(0, str(_ROOT / "benchmarks"))
  import _smoke as shrinking  # pylint: disable=g-import-not-at-top
  space = shrinking.shrunken_copy(
      _ROOT / "search_spaces" / "digits-demo.yaml", folder)
  uri = f"sqlite:///{folder}/mlflow.db"
  done = subprocess.run(
      [sys.executable, "-m", "tan_tune.cli", "search", str(space),
       "--storage", str(folder / "runs"), "--tracking-uri", uri],
      cwd=folder, capture_output=True, text=True, timeout=_TIMEOUT_S,
      env=dict(os.environ, RAY_AUTH_MODE="disabled"), check=False)
  if done.returncode:
    raise RuntimeError(f"the shared search exited {done.returncode}:\n"
                       f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
  return str(folder / "runs" / "digits-demo"), uri


@pytest.fixture(scope="module")
def smoke_runs(request, tmp_path_factory):
  """The selected scripts' smoke runs, started at first use by _AT_ONCE
  threads taking the next job by rank: the shared search, then the slowest
  script first (a new one before all), so that the short ones fill in at
  the end. A script given the shared search is queued, at its rank, once
  the search is done."""
  wanted = [item.callspec.params["name"] for item in request.session.items
            if item.module is request.module and hasattr(item, "callspec")]
  order = list(_FIGURES)
  rank = {name: order.index(name) if name in order else -1 for name in wanted}
  runs = {name: concurrent.futures.Future() for name in wanted}
  jobs = queue.PriorityQueue()
  search = concurrent.futures.Future()

  def settle(future: concurrent.futures.Future, job, *argv) -> None:
    try:
      future.set_result(job(*argv))
    except Exception as error:  # pylint: disable=broad-except
      future.set_exception(error)

  def queue_dependents() -> None:
    for name in wanted:
      if name in _SHARED_SEARCH:
        if search.exception():
          runs[name].set_exception(search.exception())
        else:
          jobs.put((rank[name], name, _SHARED_SEARCH[name](*search.result())))

  def work() -> None:
    while (job := jobs.get())[2] is not None:
      _, name, argv = job
      if name is None:
        settle(search, _shared_search, tmp_path_factory.mktemp("search"))
        queue_dependents()
      else:
        settle(runs[name], _smoke, name, *argv)

  if set(wanted) & set(_SHARED_SEARCH):
    jobs.put((-2, None, ()))
  for name in wanted:
    if name not in _SHARED_SEARCH:
      jobs.put((rank[name], name, ()))
  threads = [threading.Thread(target=work, daemon=True)
             for _ in range(_AT_ONCE)]
  for thread in threads:
    thread.start()
  yield runs
  for _ in threads:
    jobs.put((float("inf"), None, None))


def test_every_benchmark_has_a_smoke_run():
  assert sorted(_FIGURES) == _SCRIPTS, (
      "each script in benchmarks/ takes --smoke and has its lines in _FIGURES")


@pytest.mark.parametrize("name", _SCRIPTS)
def test_smoke_run_prints_its_figures(name, smoke_runs):
  done, seconds = smoke_runs[name].result()
  assert done.returncode == 0, (
      f"benchmarks/{name} --smoke exited {done.returncode} after"
      f" {seconds:.0f} s:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
  missing = [line for line in _FIGURES.get(name, ())
             if not re.search(line, done.stdout, re.MULTILINE)]
  assert name in _FIGURES and not missing, (
      f"benchmarks/{name} --smoke printed no line matching {missing}:\n"
      f"{done.stdout[-3000:]}")
