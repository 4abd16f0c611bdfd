"""The ledger's charge protocol: one for every run that spends a budget.

A promotion, each private search's trial and a private `tan-tune train` are
charged before anything trains: the store must know the dataset (or be told
`--new-ledger`, `require_known_dataset`), the dataset's composition with the
new entry must fit its budget (`check_room`), and the entry is reserved,
placed in the ledger's order and checked again against the entries placed
before it (`reserve_and_recheck`), since other runs may have charged the
dataset in between: of several at once, those that fit in the store's
order run, the others are refused.
"""

from typing import Callable

from tan_tune.errors import ConfigError
from tan_tune.ledger import composition as composition_lib
from tan_tune.ledger import ledger as ledger_lib


def require_known_dataset(ledger: ledger_lib.Ledger,
                          dataset_identity: ledger_lib.Identity,
                          dataset_name: str, new_ledger: bool) -> None:
  """Refuses to charge a store that has never seen the dataset, unless told:
  a fresh `--tracking-uri` would otherwise start an empty ledger beside the
  team's real one, and every budget would look unspent.

  Raises:
    ConfigError: the store's ledger has no entry for the dataset and
      `new_ledger` is False.
  """
  if new_ledger or ledger.entries(dataset_identity):
    return
  raise ConfigError(
      "--new-ledger", "unset",
      f"set: {ledger.tracking_uri} has no ledger entry for {dataset_name}."
      " Pass --new-ledger"
      " if this store is where the team's private runs on it are recorded"
      " and none has run yet; otherwise point --tracking-uri at the store"
      " that holds them")


def check_room(ledger: ledger_lib.Ledger, entry: ledger_lib.Entry,
               new_ledger: bool,
               budget_field: str = "reference.target_epsilon") -> None:
  """Raises ConfigError unless the store knows the dataset (or
  `new_ledger`) and its ledger has room for `entry`; `budget_field` is
  where the run's budget was set."""
  require_known_dataset(ledger, entry.dataset_identity, entry.dataset_name,
                        new_ledger)
  _refuse_over_budget(
      composition_lib.compose(ledger.entries(entry.dataset_identity), entry),
      entry, budget_field)


def charge(ledger: ledger_lib.Ledger, entry: ledger_lib.Entry,
           new_ledger: bool,
           budget_field: str = "reference.target_epsilon") -> None:
  """Checks the ledger's room, then charges `entry` (`reserve_and_recheck`).

  Raises:
    ConfigError: as `check_room`, before the charge or after it (then it is
      withdrawn).
  """
  check_room(ledger, entry, new_ledger, budget_field)
  reserve_and_recheck(
      ledger, entry,
      lambda composition: _refuse_over_budget(composition, entry,
                                              budget_field))


def reserve_and_recheck(
    ledger: ledger_lib.Ledger, entry: ledger_lib.Entry,
    refuse: Callable[[composition_lib.Composition], None]) -> None:
  """Reserves `entry`, then checks its composition with the dataset's
  entries placed before it (`Ledger.entries_before`); whatever `refuse`
  raises withdraws this charge (nothing has trained: it spent nothing) and
  goes on.

  Args:
    ledger: the store's ledger.
    entry: the run's charge.
    refuse: raises when the composition (the dataset's entries with `entry`)
      is over its budget: a run's ConfigError, a promotion's refusal.
  """
  reserved = ledger.reserve(entry)
  try:
    refuse(composition_lib.compose(ledger.entries_before(entry), entry))
  except Exception:
    if reserved:
      ledger.release(entry.promotion)
    raise


def _refuse_over_budget(composition: composition_lib.Composition,
                        entry: ledger_lib.Entry, budget_field: str) -> None:
  if not composition.within_budget:
    raise ConfigError(budget_field, entry.budget,
                      composition_lib.over_budget(composition, entry.dataset_name,
                                             "this run"))
