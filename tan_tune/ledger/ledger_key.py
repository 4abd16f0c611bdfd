"""The privacy ledger's secret key: what keys a dataset's identity in a store.

The ledger finds a dataset's entries by

    identity = HMAC-SHA256(key, d_(1) || ... || d_(n)),

d_(i) the sorted digests of its examples (`splits.Examples.keyed`). An
unkeyed digest of the examples would be a membership oracle: whoever knows
every other example hashes the data with and without a target and compares.
Keyed with 32 secret bytes, the identity says nothing about the examples to
anyone without the key, so the ledger may store it in its tags.

Where the key lives, first match:

- `TAN_TUNE_LEDGER_KEY_FILE`, for a team: the one key of the team's
  tracking server, on a volume or in a mounted Kubernetes Secret that every
  operator and cluster job of the team reads and nobody else does (the file
  may be group-readable, never group-writable or open to others). It is
  never created: `tan-tune ledger --export-key` writes it once.
- a sqlite store `sqlite:///path/x.db`: `path/x.db.ledger-key/key`;
- any other store: `~/.config/tan_tune/ledger-keys/<the URI, quoted>`,
  where `tan-tune ledger --import-key` puts a copy.

The last two are owner-only (a 0600 file in a 0700 folder) and made on a
store's first use from `secrets.token_bytes(32)`. The key is never logged,
printed or sent to the server: the store holds its key id,
HMAC-SHA256(key, "key id") cut to 16 hex digits, which tells a key from
another and nothing of it. A store whose ledger has entries but no key here
is refused rather than given a new key, which would make every dataset look
unspent.
"""

import hashlib
import hmac
import os
import pathlib
import secrets
import stat
import tempfile
from typing import Callable
from urllib import parse

from tan_tune import mlflow_store
from tan_tune.errors import ConfigError
from tan_tune.training import datasets

KEY_BYTES = 32
_SQLITE = "sqlite:///"
_SQLITE_SUFFIX = ".ledger-key"
_SERVER_KEYS = pathlib.Path("~/.config/tan_tune/ledger-keys")
_FIELD = "ledger key"
# The team's key file, read by every command that charges or reads a ledger.
KEY_FILE_VARIABLE = "TAN_TUNE_LEDGER_KEY_FILE"
_KEY_ID_HEX = 16
GET_THE_KEY = (
    f"get the team's ledger key: set {KEY_FILE_VARIABLE} to its file, or"
    " copy it here with `tan-tune ledger --import-key FILE`")

# A dataset's keyed identity as read from a store, or its examples, which
# `StoreKey.identity` keys.
Identity = str | datasets.Examples


class StoreKey:
  """One store's key, read (or made) on first use."""

  def __init__(self, tracking_uri: str, has_entries: Callable[[], bool]):
    self._uri = tracking_uri
    self._has_entries = has_entries
    self._key: bytes | None = None

  def identity(self, dataset: Identity) -> str:
    """The examples keyed with the store's key (HMAC-SHA256, hex); an
    identity read back from the store is already keyed.

    Raises:
      ConfigError: as `load`.
    """
    if isinstance(dataset, str):
      return dataset
    return dataset.keyed(self._loaded())

  def key_id(self) -> str:
    """What the store records of the key (module docstring)."""
    return key_id(self._loaded())

  def derive(self, purpose: str) -> bytes:
    """HMAC-SHA256(key, purpose): a key of its own for `purpose` (an
    attempt's checkpoints), which tells nothing of the store's key or of
    another purpose's.

    Raises:
      ConfigError: as `load`.
    """
    return hmac.new(self._loaded(), purpose.encode(), hashlib.sha256).digest()

  def export(self, path: pathlib.Path) -> None:
    """Writes the store's key (made if the store has no ledger yet) to a new
    owner-only file at `path`, for the team's operators and jobs."""
    write_copy(self._loaded(), path)

  def _loaded(self) -> bytes:
    if self._key is None:
      # A new key for a store with entries would make every dataset new.
      self._key = load(self._uri, create=not exists(self._uri)
                       and not self._has_entries())
    return self._key


def key_id(key: bytes) -> str:
  """A key's id: tells two keys apart and nothing of either."""
  return hmac.new(key, b"key id", hashlib.sha256).hexdigest()[:_KEY_ID_HEX]


def team_file() -> pathlib.Path | None:
  """The file `TAN_TUNE_LEDGER_KEY_FILE` names, if set."""
  named = os.environ.get("TAN_TUNE_LEDGER_KEY_FILE")  # KEY_FILE_VARIABLE
  return pathlib.Path(named).expanduser() if named else None


def key_path(tracking_uri: str) -> pathlib.Path:
  """Where the key of the store at `tracking_uri` lives (module docstring)."""
  return team_file() or own_key_path(tracking_uri)


def own_key_path(tracking_uri: str) -> pathlib.Path:
  """Where the key lives without a team file: beside a sqlite store, else in
  this user's config."""
  uri = mlflow_store.absolute_uri(tracking_uri)
  if uri.startswith(_SQLITE):
    database = pathlib.Path(uri[len(_SQLITE):])
    return database.with_name(database.name + _SQLITE_SUFFIX) / "key"
  return _SERVER_KEYS.expanduser() / parse.quote(uri, safe="")


def exists(tracking_uri: str) -> bool:
  """Whether the store's key file is there."""
  return key_path(tracking_uri).exists()


def load(tracking_uri: str, create: bool) -> bytes:
  """The store's key; made (owner-only) when there is none, no team file is
  named and `create`.

  Raises:
    ConfigError: no key and not `create`, or a team file that is missing;
      a key file or folder others could read or write.
  """
  path = key_path(tracking_uri)
  team = team_file() is not None
  if not path.exists():
    if team:
      raise ConfigError(
          KEY_FILE_VARIABLE, str(path),
          "an existing file: the team's ledger key. Its operator writes it"
          " once with `tan-tune ledger --export-key FILE`")
    if not create:
      raise ConfigError(
          _FIELD, str(path),
          "the key that keyed this store's ledger entries: the store has"
          f" entries but no key here; {GET_THE_KEY}")
    _create(path)
  return read_key(path, team)


def read_key(path: pathlib.Path, team: bool = False) -> bytes:
  """The key in `path`, checked: owner-only, or for a team's file readable
  by its group too (a mounted Secret may be a link: its target counts).

  Raises:
    ConfigError: others could read it or write it; not a key.
  """
  path = path.resolve()
  checked = [path] if team else [path.parent, path]
  refused = 0o027 if team else 0o077
  for item in checked:
    if stat.S_IMODE(item.stat().st_mode) & refused:
      raise ConfigError(
          _FIELD, str(item),
          "readable by its team's group at most (chmod 640 or 440)" if team
          else "owner-only (chmod 700 the folder, 600 the file): the key"
          " keys the ledger's dataset identities")
  key = path.read_bytes()
  if len(key) != KEY_BYTES:
    raise ConfigError(_FIELD, str(path), f"a file of {KEY_BYTES} bytes")
  return key


def write_copy(key: bytes, path: pathlib.Path) -> None:
  """`key` into a new owner-only file at `path` (its folder made 0700).

  Raises:
    ConfigError: `path` holds another key already.
  """
  if path.exists():
    if read_key(path) != key:
      raise ConfigError(_FIELD, str(path),
                        f"a new file: it holds another key (id"
                        f" {key_id(read_key(path))})")
    return
  _create(path, key)


def _create(path: pathlib.Path, key: bytes | None = None) -> None:
  """Writes `key` (a fresh one by default) at `path`, once: a concurrent
  first use that got there first keeps its own (the link below fails, its
  file stays)."""
  path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
  descriptor, partial = tempfile.mkstemp(dir=path.parent)  # 0600.
  try:
    with os.fdopen(descriptor, "wb") as file:
      file.write(key or secrets.token_bytes(KEY_BYTES))
    os.link(partial, path)
  except FileExistsError:
    pass
  finally:
    os.unlink(partial)
