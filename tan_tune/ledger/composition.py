"""What a dataset's ledger entries compose to, before and with a new run.

The ledger (`ledger.py`) records each private run on a dataset; a new run
is allowed only if the composition of all of them with it stays within the
dataset's budget, the smallest target epsilon any of them declared:

    RDP_total(alpha) = sum over runs r of S_r RDP_step(alpha; q_r, sigma_r),

converted to (eps, delta) at the new run's delta, by the accountant engine
(`accounting.composed_epsilon`); a private random search among them puts all
under Papernot & Steinke's repeat-and-select bound.
"""

import dataclasses
from typing import Any

from tan_tune.ledger import ledger_entry
from tan_tune.privacy import accounting
from tan_tune.privacy import tuning


@dataclasses.dataclass(frozen=True)
class Composition:
  """A dataset's spend before and with a new run.

  Attributes:
    earlier: the entries already charged (the new run's own excluded).
    spent: eps of `earlier` composed, at `delta`.
    total: eps of `earlier` and the new run composed, at `delta`.
    budget: the smallest target of the new run and of `earlier`.
    delta: the new run's delta.
  """

  earlier: tuple[ledger_entry.Entry, ...]
  spent: accounting.EpsilonReport
  total: accounting.EpsilonReport
  budget: float
  delta: float

  @property
  def within_budget(self) -> bool:
    return self.total.epsilon <= self.budget

  def as_dict(self) -> dict[str, Any]:
    return {
        "earlier": [entry.as_dict() for entry in self.earlier],
        "spent_epsilon": self.spent.epsilon,
        "total_epsilon": self.total.epsilon,
        "budget": self.budget,
        "delta": self.delta,
        "accountant": f"{self.total.accountant} (composed)",
    }


def compose(earlier: list[ledger_entry.Entry],
            new: ledger_entry.Entry | None = None) -> Composition:
  """What `new` would bring the dataset's spend to; without `new`, what the
  dataset has spent (at the smallest delta of its runs)."""
  others = tuple(e for e in earlier if new is None
                 or e.promotion != new.promotion)
  added = [new] if new else []
  delta = new.delta if new else min(e.delta for e in others)
  return Composition(
      earlier=others,
      spent=_composed_epsilon(list(others), delta),
      total=_composed_epsilon([*others, *added], delta),
      budget=min(e.budget for e in [*others, *added]),
      delta=delta,
  )


def over_budget(composition: Composition, dataset: str,
                what: str = "this run") -> str:
  """Why `composition` is refused, for people."""
  return (f"dataset {dataset} has already spent eps ="
          f" {composition.spent.epsilon:.4f} in"
          f" {len(composition.earlier)} private run(s); with {what} it would"
          f" spend {composition.total.epsilon:.4f} > its budget"
          f" {composition.budget:g} ({composition.total.accountant.upper()}"
          f" composition at delta = {composition.delta:.3g},"
          f" {composition.total.adjacency}, {composition.total.sampling});"
          " nothing was run. `tan-tune ledger` lists what was spent")


def _composed_epsilon(entries: list[ledger_entry.Entry],
                      delta: float) -> accounting.EpsilonReport:
  """The entries composed by the accountant engine; with a private search
  among them, all must be runs its accountant covers."""
  if any(e.trial_count for e in entries):
    for entry in entries:
      tuning.require_search_scheme(entry.scheme)
  return accounting.composed_epsilon([e.event for e in entries], delta)
