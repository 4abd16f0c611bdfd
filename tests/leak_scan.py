"""The leak scanner: every byte a private flow left behind, read as an attacker.

A flow runs as a user runs it (the `tan-tune` command in a subprocess, with
its own embedded Ray), inside a sandbox of three folders the scanner then
walks: the working directory (search folders, the MLflow store and its
artifacts), TMPDIR (Ray's session folder and every temp folder) and HOME.
The flow's secrets reach the test through `tan_tune.secret_capture`, in a
file kept outside the sandbox.
"""

import dataclasses
import datetime
import json
import os
import pathlib
import re
import sqlite3
import stat
import struct
import subprocess
import sys
import time
from typing import Any

from tan_tune import secret_capture

# 'YYYY-MM-DD hh:mm:ss' (also with T, /, _ or - between the parts), as Ray,
# MLflow, Optuna and Python's logging write them.
_DATETIME = re.compile(
    rb"(\d{4})[-/](\d{2})[-/](\d{2})[ T_](\d{2})[:-](\d{2})[:-](\d{2})")
# Seconds, milliseconds, microseconds or nanoseconds since the epoch.
_EPOCH = re.compile(rb"(?<!\d)(\d{10}|\d{13}|\d{16}|\d{19})(?!\d)")


@dataclasses.dataclass
class Flow:
  """One flow that ran in a sandbox.

  Attributes:
    root: the sandbox; `work`, `tmp` and `home` are scanned.
    before: every path in the sandbox before the flow, with its mtime.
    started, ended: the flow's wall clock, in seconds since the epoch.
    output: its stdout and stderr.
    returncode: its exit status.
    secrets: what `secret_capture` recorded, by kind.
  """

  root: pathlib.Path
  before: dict[pathlib.Path, float]
  started: float
  ended: float
  output: bytes
  returncode: int
  secrets: dict[str, list[Any]]

  @property
  def work(self) -> pathlib.Path:
    return self.root / "work"

  def scanned(self) -> list[pathlib.Path]:
    """Every path in the sandbox's three folders now."""
    return sorted(p for folder in ("work", "tmp", "home")
                  for p in (self.root / folder).rglob("*"))

  def written(self) -> list[pathlib.Path]:
    """Files made or changed during the flow."""
    return [p for p in self.scanned() if p.is_file() and not p.is_symlink()
            and self.before.get(p) != p.stat().st_mtime]

  def new(self) -> list[pathlib.Path]:
    """Paths made during the flow."""
    return [p for p in self.scanned() if p not in self.before]

  def seeds(self) -> list[int]:
    return [seed for kind in ("sampling", "noise", "dropout", "sampler_seed",
                              "canary_mask")
            for seed in self.secrets.get(kind, [])]

  def mlflow(self) -> sqlite3.Connection:
    return sqlite3.connect(self.work / "mlflow.db")


def sandbox(root: pathlib.Path) -> pathlib.Path:
  for folder in ("work", "tmp", "home"):
    (root / folder).mkdir(parents=True, exist_ok=True)
  return root / "work"


def run_flow(root: pathlib.Path, *argv: str, timeout: int = 600) -> Flow:
  """Runs `tan-tune *argv` in the sandbox at `root` with the secret capture
  on, and everything it left behind ready to scan."""
  sandbox(root)
  capture = root / "secrets.jsonl"  # Outside the scanned folders.
  capture.unlink(missing_ok=True)
  env = dict(os.environ, TMPDIR=str(root / "tmp"), HOME=str(root / "home"),
             RAY_AUTH_MODE="disabled", **{secret_capture.ENV: str(capture)})
  # What a user's machine has already: caches made at import (matplotlib's
  # font list), which hold nothing of a run.
  subprocess.run([sys.executable, "-c", "import tan_tune.cli.main"],
                 env=env, check=True)
  before = {p: p.stat().st_mtime for folder in ("work", "tmp", "home")
            for p in (root / folder).rglob("*")}
  started = time.time()
  done = subprocess.run(
      [sys.executable, "-m", "tan_tune.cli", *argv], cwd=root / "work",
      env=env, capture_output=True, timeout=timeout, check=False)
  ended = time.time()
  secrets: dict[str, list[Any]] = {}
  if capture.exists():
    for line in capture.read_text().splitlines():
      entry = json.loads(line)
      secrets.setdefault(entry["kind"], []).append(entry["value"])
  return Flow(root, before, started, ended, done.stdout + done.stderr,
              done.returncode, secrets)


def encodings(value: Any) -> list[bytes]:
  """How a secret number can sit in a file: as text (decimal, hex, repr)
  and as the 8 bytes of a torch generator state or a float64."""
  if isinstance(value, bool):
    return []
  if isinstance(value, int):
    forms = [str(value).encode(), f"{value:x}".encode()]
    if 0 <= value < 2**64:
      forms.append(value.to_bytes(8, "little"))
    return forms
  if isinstance(value, float):
    return [repr(value).encode(), struct.pack("<d", value)]
  return []


def find_bytes(flow: Flow, needles: list[bytes]) -> list[str]:
  """'where: which' for every needle found in a written file or the output."""
  found = []
  for name, data in [("terminal", flow.output),
                     *((str(p), p.read_bytes()) for p in flow.written())]:
    found += [f"{name}: {needle!r}" for needle in needles if needle in data]
  return found


def readable_by_others(flow: Flow) -> list[str]:
  """New files, and new folders with something in them, whose mode lets
  another user read, write or enter them."""
  found = []
  for path in flow.new():
    if path.is_symlink() or (path.is_dir() and not any(path.iterdir())):
      continue
    mode = stat.S_IMODE(path.lstat().st_mode)
    if mode & 0o077:
      found.append(f"{path}: {mode:o}")
  return found


def timestamps_within(flow: Flow, start: float, end: float) -> list[str]:
  """Text timestamps of a second or finer in (start, end] in the output or a
  written file: the time something happened during a private run."""
  found = []
  for name, data in [("terminal", flow.output),
                     *((str(p), p.read_bytes()) for p in flow.written())]:
    for match in _DATETIME.finditer(data):
      try:
        moment = datetime.datetime(*map(int, match.groups())).timestamp()
      except ValueError:
        continue
      # Local or UTC: either reading inside the window is a leak.
      offset = datetime.datetime.now().astimezone().utcoffset().total_seconds()
      if any(start < t <= end for t in (moment, moment + offset)):
        found.append(f"{name}: {match.group().decode()}")
    for match in _EPOCH.finditer(data):
      digits = match.group()
      seconds = int(digits) / 10 ** (len(digits) - 10)
      if start < seconds <= end:
        found.append(f"{name}: {digits.decode()}")
  return found


def mlflow_runs(flow: Flow) -> list[dict[str, Any]]:
  """Every MLflow run started during the flow, deleted ones included, with
  its tags and its metrics as (key, timestamp) pairs."""
  with flow.mlflow() as db:
    runs = db.execute(
        "select run_uuid, start_time, end_time from runs where start_time >= ?",
        (int(flow.started * 1000),)).fetchall()
    return [{
        "run_id": run_id, "start_time": start_time, "end_time": end_time,
        "tags": dict(db.execute(
            "select key, value from tags where run_uuid = ?", (run_id,))),
        "metrics": db.execute(
            "select key, timestamp from metrics where run_uuid = ?",
            (run_id,)).fetchall(),
    } for run_id, start_time, end_time in runs]
