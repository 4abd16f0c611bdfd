"""The leak scanner: every byte a private flow left behind, read as an attacker.

A flow runs as a user runs it (the `tan-tune` command in a subprocess, with
its own embedded Ray), inside a sandbox of three folders the scanner then
walks: the working directory (search folders, the MLflow store and its
artifacts), TMPDIR (Ray's session folder and every temp folder) and HOME,
made 0755, 1777 and 0755 as a user's usually are, so that another user could
walk into them. A sandbox starts as a copy of one `warm_up` prepared once:
what a user's machine has already.

The flow's secrets reach the test from test code alone: the flow's
PYTHONPATH starts with `tests/secret_spy/`, whose `sitecustomize.py` every
process of the flow (the command and each Ray worker) imports at start-up;
it wraps `secrets.randbits`, `secrets.token_bytes` and a private search's
trial count, sampler seed and trial parameters, and appends what they return
to a file outside the sandbox.

While the flow runs, a thread polls the sandbox every `POLL_SECONDS` for a
new path another local user could read or write (reaching it through
folders they may enter, and through a symlink to wherever it resolves);
afterwards the scanner reads the written files, the terminal, the MLflow
store's rows and every mtime, and the ctimes another user can `stat`
(`other_users.py`), which no one can set back.
"""

import dataclasses
import datetime
import hashlib
import json
import math
import os
import pathlib
import re
import shutil
import sqlite3
import struct
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np
from sklearn import datasets as sk_datasets

import other_users

SPY = pathlib.Path(__file__).parent / "secret_spy"
SPY_LOG_ENV = "LEAK_SCAN_SECRET_LOG"  # The spy's `LOG_ENV`.
POLL_SECONDS = 0.2
# Who draws the store's ledger key: a secret of the store, not of a run,
# kept in its own owner-only file.
LEDGER_KEY = "tan_tune.ledger.ledger_key"
# The sandbox's folders and their modes: a working directory and HOME that
# others may enter, a TMPDIR like /tmp.
_FOLDERS = {"work": 0o755, "tmp": 0o1777, "home": 0o755}

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
    secrets: what the spy recorded, by kind: the drawing module's name for
      `secrets` draws, else 'sampler_seed', 'trial_count', 'trial_params'.
    drawn_at: when the first secret of each kind was drawn.
    exposed_while_running: what `exposed` found while the flow ran.
  """

  root: pathlib.Path
  before: dict[pathlib.Path, float]
  started: float
  ended: float
  output: bytes
  returncode: int
  secrets: dict[str, list[Any]]
  exposed_while_running: list[str]
  drawn_at: dict[str, float] = dataclasses.field(default_factory=dict)

  @property
  def work(self) -> pathlib.Path:
    return self.root / "work"

  def scanned(self) -> list[pathlib.Path]:
    """Every path in the sandbox's three folders now."""
    return sorted(p for folder in _FOLDERS
                  for p in (self.root / folder).rglob("*"))

  def changed(self) -> list[pathlib.Path]:
    """Files and folders (not links) made or changed during the flow."""
    return [p for p in self.scanned() if not p.is_symlink()
            and self.before.get(p) != p.stat().st_mtime]

  def written(self) -> list[pathlib.Path]:
    """Files made or changed during the flow."""
    return [p for p in self.changed() if p.is_file()]

  def seeds(self) -> list[int | bytes]:
    """Every secret seed a run drew: by a `tan_tune` module (but the
    ledger key), or the sampler's."""
    return [seed for kind, drawn in self.secrets.items()
            if kind.startswith("tan_tune.") and kind != LEDGER_KEY
            or kind == "sampler_seed" for seed in drawn]

  def mlflow(self) -> sqlite3.Connection:
    return sqlite3.connect(self.work / "mlflow.db")


def sandbox(root: pathlib.Path,
            like: pathlib.Path | None = None) -> pathlib.Path:
  """Makes the sandbox's folders at `root`, holding a copy of what those of
  the sandbox `like` hold (mtimes and modes kept); its working directory."""
  for folder, mode in _FOLDERS.items():
    if like:
      shutil.copytree(like / folder, root / folder, symlinks=True,
                      dirs_exist_ok=True)
    (root / folder).mkdir(parents=True, exist_ok=True)
    (root / folder).chmod(mode)
  return root / "work"


def warm_up(root: pathlib.Path) -> None:
  """A sandbox at `root` holding what a user's machine has already: the
  caches made at import (matplotlib's font list, MLflow's installation id),
  which hold nothing of a run. Made once, copied into each flow's sandbox:
  an import costs ~10 s of CPU."""
  sandbox(root)
  # Every command's module: `tan-tune` imports only the one it runs.
  subprocess.run([sys.executable, "-c",
                  "from tan_tune.cli import main;"
                  " main.build_parser(*main.COMMANDS)"],
                 env=_environment(root), check=True)


def _environment(root: pathlib.Path, **more: str) -> dict[str, str]:
  path = os.pathsep.join(filter(None, [str(SPY), os.environ.get("PYTHONPATH")]))
  # One torch thread, as Ray gives its workers: `train` trains in the
  # command's own process, where a thread per core spins against the other
  # tests' processes (1.6 times the CPU time, measured on 2 busy cores).
  return dict(os.environ, TMPDIR=str(root / "tmp"), HOME=str(root / "home"),
              RAY_AUTH_MODE="disabled", PYTHONPATH=path, OMP_NUM_THREADS="1",
              **more)


def run_flow(root: pathlib.Path, *argv: str, timeout: int = 600,
             program: str | None = None) -> Flow:
  """Runs `tan-tune *argv`, or the Python `program`, in the sandbox at
  `root` under the spy, polling the sandbox while it runs; everything it
  left behind is ready to scan."""
  sandbox(root)
  log = root / "secrets.jsonl"  # Outside the scanned folders.
  log.unlink(missing_ok=True)
  env = _environment(root, **{SPY_LOG_ENV: str(log)})
  before = {p: p.stat().st_mtime for folder in _FOLDERS
            for p in (root / folder).rglob("*")}
  seen: set[str] = set()
  stop = threading.Event()
  poller = threading.Thread(
      target=_poll, args=(root, {str(p) for p in before}, stop, seen))
  poller.start()
  started = time.time()
  try:
    done = subprocess.run(
        [sys.executable, *(["-c", program] if program
                           else ["-m", "tan_tune.cli", *argv])],
        cwd=root / "work", env=env, capture_output=True, timeout=timeout,
        check=False)
  finally:
    stop.set()
    poller.join()
  ended = time.time()
  secrets: dict[str, list[Any]] = {}
  drawn_at: dict[str, float] = {}
  if log.exists():
    for line in log.read_text().splitlines():
      entry = json.loads(line)
      value = bytes.fromhex(entry["hex"]) if "hex" in entry else entry["value"]
      secrets.setdefault(entry["kind"], []).append(value)
      drawn_at[entry["kind"]] = min(drawn_at.get(entry["kind"], math.inf),
                                    entry["time"])
  return Flow(root, before, started, ended, done.stdout + done.stderr,
              done.returncode, secrets, sorted(seen), drawn_at)


def _tops(root: pathlib.Path) -> list[pathlib.Path]:
  return [root / folder for folder in _FOLDERS]


def _poll(root: pathlib.Path, old: set[str], stop: threading.Event,
          seen: set[str]) -> None:
  while True:
    seen.update(other_users.exposed(_tops(root), old))
    if stop.wait(POLL_SECONDS):
      return


def readable_files(flow: Flow) -> list[pathlib.Path]:
  """The files another user can read after the flow (`exposed`), wherever
  a link led."""
  paths = (pathlib.Path(line.rpartition(": ")[0])
           for line in readable_by_others(flow))
  return [path for path in paths if path.is_file()]


def readable_by_others(flow: Flow) -> list[str]:
  """`exposed` after the flow: what it left for another user."""
  return other_users.exposed(_tops(flow.root),
                             {str(p) for p in flow.before})


def encodings(value: Any) -> list[bytes]:
  """How a secret can sit in a file: a number as text (decimal, hex, repr)
  and as the 8 bytes of a torch generator state or a float64; bytes as they
  are and in hex."""
  if isinstance(value, bool):
    return []
  if isinstance(value, bytes):
    return [value, value.hex().encode()]
  if isinstance(value, int):
    forms = [str(value).encode(), f"{value:x}".encode()]
    if 0 <= value < 2**64:
      forms.append(value.to_bytes(8, "little"))
    return forms
  if isinstance(value, float):
    return [repr(value).encode(), struct.pack("<d", value)]
  return []


def find_bytes(flow: Flow, needles: list[bytes],
               everywhere: bool = False) -> list[str]:
  """'where: which' for every needle found in the output or a written file
  (the MLflow store's database among them); `everywhere`: in every file of
  the sandbox, made by the flow or before it."""
  files = ([p for p in flow.scanned() if p.is_file() and not p.is_symlink()]
           if everywhere else flow.written())
  found = []
  for name, data in [("terminal", flow.output),
                     *((str(p), p.read_bytes()) for p in files)]:
    found += [f"{name}: {needle!r}" for needle in needles if needle in data]
  return found


def hex_windows(digest: str, width: int = 8) -> list[bytes]:
  """Every `width` consecutive hex digits of `digest`, in both cases: a
  prefix or any slice of a data digest is as good as the digest to test a
  guess at the data."""
  return [form for i in range(len(digest) - width + 1)
          for form in (digest[i:i + width].lower().encode(),
                       digest[i:i + width].upper().encode())]


def old_digits_fingerprint() -> str:
  """The digits' ledger identity as the package published it before issue
  38 (`datasets.fingerprint`), kept here since the package changed it:
  SHA-256 over the sorted BLAKE2b-128 digests of each example's uint8 image
  bytes and its label as 8 little-endian bytes, both splits pooled."""
  digits = sk_datasets.load_digits()
  digests = sorted(
      hashlib.blake2b(image.astype(np.uint8).tobytes()
                      + int(label).to_bytes(8, "little"),
                      digest_size=16).digest()
      for image, label in zip(digits.images, digits.target))
  return hashlib.sha256(b"".join(digests)).hexdigest()


def unkeyed_fingerprint(dataset) -> str:
  """SHA-256 of a dataset's sorted per-example digests as the package now
  computes them (`Split.example_digests`), both splits pooled: what an
  unkeyed fingerprint of its canonical digests would publish."""
  digests = sorted(dataset.train.example_digests()
                   + dataset.test.example_digests())
  return hashlib.sha256(b"".join(digests)).hexdigest()


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


def modified_after(flow: Flow, moment: float) -> list[str]:
  """Files and folders the flow made or changed whose mtime is after
  `moment`: how long the run went on."""
  return [f"{p}: start + {p.lstat().st_mtime - moment:.1f} s"
          for p in flow.changed() if p.lstat().st_mtime > moment]


def experiments_updated(flow: Flow, start: float, end: float) -> list[str]:
  """MLflow experiments whose last update falls in (start, end]."""
  with flow.mlflow() as db:
    rows = db.execute(
        "select name, last_update_time from experiments"
        " where last_update_time > ? and last_update_time <= ?",
        (int(start * 1000), int(end * 1000))).fetchall()
  return [f"{name}: {updated / 1000 - start:.1f} s after"
          for name, updated in rows]


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


def registry(flow: Flow) -> dict[str, Any]:
  """The Model Registry of the flow's store: every registered model and
  version with its times (in seconds), description and tags, and every
  alias. A registry dates what it makes: its times say when."""
  with flow.mlflow() as db:
    models = db.execute(
        "select name, creation_time, last_updated_time, description"
        " from registered_models").fetchall()
    versions = db.execute(
        "select name, version, creation_time, last_updated_time, description,"
        " source from model_versions").fetchall()
    return {
        "times": [t / 1000 for row in models + versions
                  for t in (row[1:3] if len(row) == 4 else row[2:4])
                  if t is not None],
        "descriptions": [row[3] for row in models] + [row[4] for row in
                                                      versions],
        "sources": [(row[0], row[5]) for row in versions],
        "tags": db.execute("select key, value from model_version_tags"
                           " union all select key, value from"
                           " registered_model_tags").fetchall(),
        "aliases": db.execute(
            "select alias, version from registered_model_aliases").fetchall(),
    }
