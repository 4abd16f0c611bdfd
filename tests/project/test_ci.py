""".ci/run runs `make test`, then `make bench-smoke`, and fails if either
fails, running the second after a failed first.

The script is run as CI runs it, with a `make` first on PATH that records
its target and exits as told: what is checked is the script's own control
flow (both steps, in order, each failing the run); what the steps run is
checked by the suite and the smoke tier themselves.
"""

import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _ci(tmp_path: pathlib.Path, failing: set[str]) -> tuple[int, list[str]]:
  """.ci/run's exit status, and the make targets it ran in order."""
  tools = tmp_path / "bin"
  tools.mkdir()
  log = tmp_path / "targets"
  make = tools / "make"
  make.write_text(
      "#!/bin/sh\n"
      f'echo "$1" >> {log}\n'
      f'case " {" ".join(sorted(failing))} " in *" $1 "*) exit 2;; esac\n')
  make.chmod(0o755)
  # A copy of the repository's CI folder, so that its `cd ..` lands here.
  shutil.copytree(ROOT / ".ci", tmp_path / ".ci")
  done = subprocess.run(
      ["bash", str(tmp_path / ".ci" / "run")], capture_output=True, text=True,
      env=dict(os.environ, PATH=f"{tools}{os.pathsep}{os.environ['PATH']}"),
      check=False)
  return done.returncode, log.read_text().split()


@pytest.mark.parametrize("failing, status", [
    (set(), 0), ({"test"}, 1), ({"bench-smoke"}, 1),
    ({"test", "bench-smoke"}, 1)])
def test_both_steps_run_and_each_fails_the_run(tmp_path, failing, status):
  assert _ci(tmp_path, failing) == (status, ["test", "bench-smoke"])
