"""ledger as a Python function: what each dataset has spent, typed.

It reads what `tan-tune ledger` prints (the command parses its arguments,
calls `ledger` and prints the result): every private run charged to the
store's privacy ledger, grouped by the dataset it trained on, and each
dataset's composed spend. A dataset is shown by its name and its random
ledger id, never by anything computed from its examples.
"""

import dataclasses
from typing import Any

from tan_tune.privacy import accounting
from tan_tune.private_runs import composition as composition_lib
from tan_tune.private_runs import ledger as ledger_lib
from tan_tune.private_runs import mlflow_store


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
  """A store's privacy ledger: each dataset's spend, in the order of its
  first charge; empty when the store has no private run."""

  tracking_uri: str
  datasets: tuple[DatasetSpend, ...]


def ledger(tracking_uri: str = mlflow_store.DEFAULT_TRACKING_URI
           ) -> LedgerReport:
  """What each dataset has spent in the private runs charged to the store
  at `tracking_uri`; reading creates nothing in it."""
  datasets: dict[str, list[ledger_lib.Entry]] = {}
  for entry in ledger_lib.Ledger(tracking_uri).entries():
    datasets.setdefault(entry.dataset_identity, []).append(entry)
  spends = []
  for charged in datasets.values():
    spent = composition_lib.compose(charged)
    spends.append(DatasetSpend(
        ledger_id=next((e.ledger_id for e in charged if e.ledger_id), None),
        dataset_name=charged[0].dataset_name, runs=tuple(charged),
        composed=spent.total, delta=spent.delta, budget=spent.budget))
  return LedgerReport(tracking_uri, tuple(spends))
