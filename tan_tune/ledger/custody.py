"""One charge, one run, one place: the custody of a private run's checkpoints.

A ledger entry pays for one run. The run's checkpoints hold its secret
generator states, so without custody they could pay for more: copied to
other folders and resumed (with another clip norm, say), each copy would
release a model of its own on the one charge, and since the copies share
their noise, it cancels in their differences. So a charged attempt is held:

- **Sealed.** Its checkpoints are sealed under k_a = HMAC-SHA256(K,
  "checkpoint:" a), K the store's ledger key and a the attempt
  (`checkpoint_file.py`): without K nobody forges one (step 0 and fresh
  generator states would train again on one charge), and no attempt opens
  another's.
- **One configuration.** Its entry records the digest of the configuration
  it paid for, and each checkpoint carries that configuration
  (`trial_config.charged`): a resume with any field edited is refused,
  naming the fields, never run with the edit ignored.
- **One place.** The first start records where the attempt runs,
  `host:/resolved/folder`, as the entry's param `custody.place.0`; a resume
  from any other place is refused, and a live run holds its folder's lock,
  so a second process in the same place is refused too. MLflow never
  changes a param and of two writes at once keeps the first, so two copies
  started together cannot both take the place.
- **Moved on purpose.** A run whose folder was moved (to another disk, say)
  resumes with `move_from` naming the folder it ran in (`--move-from`):
  that folder must be the attempt's place, on this host and not in use; its
  checkpoint is deleted, and the entry records the new place once
  (`custody.place.1`, ...).
- **Finished once.** The run records `custody.finished` = its place before
  it releases anything; a finished attempt trains again nowhere.
"""

import contextlib
import fcntl
import os
import pathlib
import socket
from typing import Iterator

from tan_tune.errors import ConfigError
from tan_tune.ledger import ledger as ledger_lib
from tan_tune.release import release
from tan_tune.training import checkpoint_file
from tan_tune.training import trial_config

PARAM = "custody"
FINISHED = "finished"
_PLACE = "place"


def place(folder: pathlib.Path) -> str:
  """Where a run keeps its checkpoints: this host and the resolved folder
  (a symlink or a relative path names the same place)."""
  return f"{socket.gethostname()}:{pathlib.Path(folder).resolve()}"


def seal(ledger: ledger_lib.Ledger, charge: str,
         config: trial_config.TrialConfig | None) -> checkpoint_file.Seal:
  """How the run that `charge` paid for seals its checkpoints; a private
  search's (`config` None) seals each trial's with a part of it
  (`checkpoint_file.Seal.part`)."""
  return checkpoint_file.Seal(
      charge, ledger.derive_key(f"checkpoint:{charge}"),
      trial_config.charged(config) if config else {})


@contextlib.contextmanager
def held(folder: pathlib.Path, field: str) -> Iterator[None]:
  """Holds `folder` (made owner-only if new, and removed again if it is
  still empty at the end: a refused run leaves nothing) for one run; the
  lock goes with the process, so a killed run's folder is free again.

  Raises:
    ConfigError: another live process holds it.
  """
  folder = pathlib.Path(folder)
  made = not folder.exists()
  folder.mkdir(mode=0o700, parents=True, exist_ok=True)
  descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
  try:
    try:
      fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      raise ConfigError(
          field, str(folder),
          "a folder no other run is using: another process is running in"
          " it now") from None
    yield
  finally:
    if made and not any(folder.iterdir()):
      folder.rmdir()
    os.close(descriptor)


def take(ledger: ledger_lib.Ledger, charge: str, folder: pathlib.Path,
         field: str, move_from: pathlib.Path | None = None) -> None:
  """Starts or resumes the attempt `charge` in `folder` (held by the
  caller); with `move_from`, moves it there from that folder first.

  Raises:
    ConfigError: the attempt runs in another place (a copy); `move_from` is
      not its place or is in use.
  """
  here = place(folder)
  places = _places(ledger, charge)
  current = places[-1] if places else _claim(ledger, charge,
                                             f"{_PLACE}.0", here)
  if move_from is not None:
    _move(ledger, charge, len(places), pathlib.Path(move_from), current, here)
  elif current != here:
    raise ConfigError(
        field, str(folder),
        f"the folder attempt {charge} runs in, {current}: a copy of a private"
        " run's checkpoint resumes nowhere else, since one charge pays for"
        " one run. Resume it there, move it here with --move-from, or use an"
        " empty folder for a new, charged run")


def finish(ledger: ledger_lib.Ledger, charge: str, folder: pathlib.Path,
           field: str) -> None:
  """Records that the attempt finished in `folder`, before it releases.

  Raises:
    ConfigError: another place finished it first.
  """
  here = place(folder)
  holder = _claim(ledger, charge, FINISHED, here)
  if holder != here:
    raise ConfigError(
        field, str(folder),
        f"the place attempt {charge} runs in: it finished in {holder}, and"
        " one charge pays for one run. Nothing of this run is released")


def require_config(ledger: ledger_lib.Ledger, entry: ledger_lib.Entry,
                   folder: pathlib.Path, field: str) -> None:
  """Refuses to resume the attempt `entry.promotion` with another
  configuration than its charge recorded (`trial_config.charged_digest`).

  Raises:
    ConfigError: the configuration differs.
  """
  [charged] = ledger.runs_of(entry.promotion)
  recorded = charged.data.params.get("config_sha256")
  if recorded != entry.config_sha256:
    raise ConfigError(
        field, str(folder),
        f"a resume of the configuration attempt {entry.promotion} was"
        " charged for: it has changed since (the run's file or options)."
        " An edit is never ignored on resume: restore it, or start anew")


def require_unfinished(ledger: ledger_lib.Ledger, charge: str,
                       folder: pathlib.Path, field: str) -> None:
  """Refuses to train the attempt `charge` again once it has finished (its
  stripped checkpoint may still report).

  Raises:
    ConfigError: the attempt has finished.
  """
  if FINISHED in _records(ledger, charge):
    raise ConfigError(
        field, str(folder),
        f"a folder of a run that has not finished: attempt {charge}"
        " finished, and a finished run never trains again (it would release"
        " a second model on one charge). Use an empty folder for a new,"
        " charged run")


def _move(ledger: ledger_lib.Ledger, charge: str, index: int,
          old: pathlib.Path, current: str, here: str) -> None:
  """Moves the attempt from `old` (its place `current`) to `here` and
  retires `old`: its checkpoint goes."""
  if place(old) != current:
    raise ConfigError(
        "--move-from", str(old),
        f"the folder attempt {charge} runs in, {current}, on this host")
  with held(old, "--move-from"):
    holder = _claim(ledger, charge, f"{_PLACE}.{index}", here)
    if holder != here:
      raise ConfigError("--move-from", str(old),
                        f"a folder not moved meanwhile: it moved to {holder}")
    (old / checkpoint_file.CHECKPOINT_FILE).unlink(missing_ok=True)


def _places(ledger: ledger_lib.Ledger, charge: str) -> list[str]:
  """The attempt's places, first to current."""
  records = _records(ledger, charge)
  indices = sorted(int(key.split(".")[1]) for key in records
                   if key.startswith(f"{_PLACE}."))
  return [records[f"{_PLACE}.{index}"] for index in indices]


def _records(ledger: ledger_lib.Ledger, charge: str) -> dict[str, str]:
  prefix = f"{PARAM}."
  return {key[len(prefix):]: value for run in ledger.runs_of(charge)
          for key, value in run.data.params.items()
          if key.startswith(prefix)}


def _claim(ledger: ledger_lib.Ledger, charge: str, name: str,
           value: str) -> str:
  """Records `name` = `value` on the attempt's entry unless it holds a
  value already (the first writer's wins); returns the value it holds."""
  [run] = ledger.runs_of(charge)
  ledger.restore(run)
  return release.Release().log_param_once(
      ledger.client, run.info.run_id, ledger_lib.ENTRY_KIND,
      f"{PARAM}.{name}", value)
