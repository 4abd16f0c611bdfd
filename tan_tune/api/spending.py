"""ledger as a Python function: what each dataset has spent, typed.

It reads what `tan-tune ledger` prints (the command parses its arguments,
calls `ledger` and prints the result): every private run charged to the
store's privacy ledger, grouped by the dataset it trained on, and each
dataset's composed spend. A dataset is shown by its name and its random
ledger id, never by anything computed from its examples.
"""

import dataclasses
import pathlib
from typing import Any

from tan_tune import mlflow_store
from tan_tune.errors import ConfigError
from tan_tune.ledger import composition as composition_lib
from tan_tune.ledger import ledger as ledger_lib
from tan_tune.ledger import ledger_key
from tan_tune.privacy import accounting


@dataclasses.dataclass(frozen=True)
class DatasetSpend:
  """One dataset's private runs and their composed spend.

  Attributes:
    ledger_id: the random id its first charge drew, which later charges
      copy (None while no entry of the dataset carries one).
    dataset_name: the name it was given.
    runs: its entries, oldest first, each counted at its planned steps
      from the moment it was charged, finished or not.
    composed: the runs' epsilon composed, at `delta`.
    delta: the smallest delta of the runs.
    budget: the smallest target any of them declared.
  """

  ledger_id: str | None
  dataset_name: str
  runs: tuple[ledger_lib.Entry, ...]
  composed: accounting.EpsilonReport
  delta: float
  budget: float

  def as_dict(self) -> dict[str, Any]:
    """What `tan-tune ledger --json` prints of the dataset."""
    return {
        "ledger_id": self.ledger_id,
        "dataset_name": self.dataset_name,
        "runs": [entry.as_dict() for entry in self.runs],
        "composed_epsilon": self.composed.epsilon,
        "delta": self.delta,
        "budget": self.budget,
        "accountant": f"{self.composed.accountant} (composed)",
        "adjacency": self.composed.adjacency,
        "sampling": self.composed.sampling,
    }


@dataclasses.dataclass(frozen=True)
class LedgerReport:
  """A store's privacy ledger.

  Attributes:
    tracking_uri: the MLflow store read.
    datasets: each dataset's spend, in the order of its first charge;
      empty when the store has no private run.
    key_id: the id of the key the ledger's entries are under; None when
      the store has no private run.
  """

  tracking_uri: str
  datasets: tuple[DatasetSpend, ...]
  key_id: str | None = None


def ledger(tracking_uri: str = mlflow_store.DEFAULT_TRACKING_URI
           ) -> LedgerReport:
  """What each dataset has spent in the private runs charged to the store
  at `tracking_uri`; reading creates nothing in it.

  Args:
    tracking_uri: the MLflow store whose ledger is read.

  Raises:
    ConfigError: an entry was edited without the key; the store's ledger is
      under another key than this user's.
  """
  store = ledger_lib.Ledger(tracking_uri)
  datasets: dict[str, list[ledger_lib.Entry]] = {}
  for entry in store.entries():
    datasets.setdefault(entry.dataset_identity, []).append(entry)
  spends = []
  for charged in datasets.values():
    spent = composition_lib.compose(charged)
    spends.append(DatasetSpend(
        ledger_id=next((e.ledger_id for e in charged if e.ledger_id), None),
        dataset_name=charged[0].dataset_name, runs=tuple(charged),
        composed=spent.total, delta=spent.delta, budget=spent.budget))
  return LedgerReport(tracking_uri, tuple(spends),
                      store.store_key_id() if spends else None)


def export_ledger_key(path: pathlib.Path,
                      tracking_uri: str = mlflow_store.DEFAULT_TRACKING_URI
                      ) -> str:
  """Writes the key of the store's ledger (made, if the store has no ledger
  yet) to a new owner-only file at `path`, for the team's
  `TAN_TUNE_LEDGER_KEY_FILE` or `import_ledger_key`; returns its key id.

  Args:
    path: the new file; it must not exist, unless it holds this key.
    tracking_uri: the MLflow store whose ledger's key is written.

  Raises:
    ConfigError: as the ledger's key (`ledger_key.load`); `path` holds
      another key.
  """
  store = ledger_lib.Ledger(tracking_uri)
  store.export_key(path)
  return ledger_key.key_id(ledger_key.read_key(path))


def import_ledger_key(path: pathlib.Path,
                      tracking_uri: str = mlflow_store.DEFAULT_TRACKING_URI
                      ) -> pathlib.Path:
  """Copies the team's key in `path` to where this user's commands read the
  store's key without `TAN_TUNE_LEDGER_KEY_FILE`; returns that place.

  Args:
    path: the team's key file, as `export_ledger_key` wrote it.
    tracking_uri: the MLflow store the key is for.

  Raises:
    ConfigError: `path` may be read by others than its owner and group, or
      is no key; the store's ledger is under another key; this user holds
      another key for the store already.
  """
  key = ledger_key.read_key(path, team=True)
  store_key = ledger_lib.Ledger(tracking_uri).store_key_id()
  if store_key not in (None, ledger_key.key_id(key)):
    raise ConfigError("--import-key", str(path),
                      f"the key of this store's ledger (key id {store_key});"
                      f" this file holds key id {ledger_key.key_id(key)}")
  destination = ledger_key.own_key_path(tracking_uri)
  ledger_key.write_copy(key, destination)
  return destination
