"""The privacy ledger's secret key: what keys a dataset's identity in a store.

The ledger finds a dataset's entries by

    identity = HMAC-SHA256(key, d_(1) || ... || d_(n)),

d_(i) the sorted digests of its examples (`splits.Examples.keyed`). An
unkeyed digest of the examples would be a membership oracle: whoever knows
every other example hashes the data with and without a target and compares.
Keyed with 32 secret bytes, the identity says nothing about the examples to
anyone without the key, so the ledger may store it in its tags.

The key lives beside the store, owner-only (a 0600 file in a 0700 folder),
and is created on first use from `secrets.token_bytes(32)`; it is never
logged or printed. For a sqlite store `sqlite:///path/x.db` it is
`path/x.db.ledger-key/key`; for any other store (a tracking server) it is
`~/.config/tan_tune/ledger-keys/<the URI, quoted>`: operators sharing one
server must share that file (copied owner-only), or each would key the same
data differently and start a ledger of their own. A store whose ledger has
entries but whose key is missing is refused rather than given a new key,
which would make every dataset look unspent.
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

from tan_tune.errors import ConfigError
from tan_tune.private_runs import mlflow_store
from tan_tune.training import datasets

KEY_BYTES = 32
_SQLITE = "sqlite:///"
_SQLITE_SUFFIX = ".ledger-key"
_SERVER_KEYS = pathlib.Path("~/.config/tan_tune/ledger-keys")
_FIELD = "ledger key"

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

  def derive(self, purpose: str) -> bytes:
    """HMAC-SHA256(key, purpose): a key of its own for `purpose` (an
    attempt's checkpoints), which tells nothing of the store's key or of
    another purpose's.

    Raises:
      ConfigError: as `load`.
    """
    return hmac.new(self._loaded(), purpose.encode(), hashlib.sha256).digest()

  def _loaded(self) -> bytes:
    if self._key is None:
      # A new key for a store with entries would make every dataset new.
      self._key = load(self._uri, create=not exists(self._uri)
                       and not self._has_entries())
    return self._key


def key_path(tracking_uri: str) -> pathlib.Path:
  """Where the key of the store at `tracking_uri` lives (module docstring)."""
  uri = mlflow_store.absolute_uri(tracking_uri)
  if uri.startswith(_SQLITE):
    database = pathlib.Path(uri[len(_SQLITE):])
    return database.with_name(database.name + _SQLITE_SUFFIX) / "key"
  return _SERVER_KEYS.expanduser() / parse.quote(uri, safe="")


def exists(tracking_uri: str) -> bool:
  """Whether the store's key file is there."""
  return key_path(tracking_uri).exists()


def load(tracking_uri: str, create: bool) -> bytes:
  """The store's key; made (owner-only) when there is none and `create`.

  Raises:
    ConfigError: no key and not `create`; or a key file or folder another
      user could read or write.
  """
  path = key_path(tracking_uri)
  if not path.exists():
    if not create:
      raise ConfigError(
          _FIELD, str(path),
          "the key file that keyed this store's ledger entries: the store"
          " has entries but no key, so no dataset can be found in it."
          " Restore the file (a shared server's operators share it), or"
          " point --tracking-uri at another store")
    _create(path)
  for item in (path.parent, path):
    if stat.S_IMODE(item.stat().st_mode) & 0o077:
      raise ConfigError(_FIELD, str(item),
                        "owner-only (chmod 700 the folder, 600 the file): the"
                        " key keys the ledger's dataset identities")
  key = path.read_bytes()
  if len(key) != KEY_BYTES:
    raise ConfigError(_FIELD, str(path), f"a file of {KEY_BYTES} bytes")
  return key


def _create(path: pathlib.Path) -> None:
  """Writes a fresh key at `path`, once: a concurrent first use that got
  there first keeps its own (the link below fails, its file stays)."""
  path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
  descriptor, partial = tempfile.mkstemp(dir=path.parent)  # 0600.
  try:
    with os.fdopen(descriptor, "wb") as file:
      file.write(secrets.token_bytes(KEY_BYTES))
    os.link(partial, path)
  except FileExistsError:
    pass
  finally:
    os.unlink(partial)
