"""Processes that charge one ledger at one instant: the team tier's races.

Each racer is a process of its own (spawned: no state of the test's), with
its own environment (a person's HOME and login, a job's key file), that
charges a synthetic run at a wall-clock instant through the ledger's real
protocol (`charge.charge`) against the real server.
"""

import concurrent.futures
import contextlib
import multiprocessing
import os
import time
from typing import Iterator

from tan_tune.errors import ConfigError
from tan_tune.ledger import charge
from tan_tune.ledger import composition as composition_lib
from tan_tune.ledger import ledger as ledger_lib
from tan_tune.privacy import accounting
from tan_tune.privacy import triplet as triplet_lib

# Far enough ahead that every racer is waiting when it comes.
_LEAD_S = 2.0
_RUN = triplet_lib.PrivacyTriplet(1437, 512, 4.0, 100)


def run_entry(identity: str, promotion: str,
              budget: float) -> ledger_lib.Entry:
  """A racer's charge: a digits-sized run, eps about 0.25."""
  return ledger_lib.Entry(
      dataset_identity=identity, dataset_name="digits", promotion=promotion,
      triplet=_RUN, delta=1 / _RUN.dataset_size,
      epsilon=accounting.epsilon(_RUN).epsilon, budget=budget)


def budget_of(runs: int) -> float:
  """A budget `runs` racers' charges fit in, one more not."""
  def spent(count):
    entries = [run_entry("x", f"r{i}", 100.0) for i in range(count)]
    return composition_lib.compose(entries).total.epsilon
  return (spent(runs) + spent(runs + 1)) / 2


def _charge_at(start: float, env: dict[str, str | None], tracking_uri: str,
               entry: ledger_lib.Entry) -> str:
  """'ran', or 'refused: <the one line>'."""
  for name, value in env.items():
    if value is None:
      os.environ.pop(name, None)
    else:
      os.environ[name] = value
  ledger = ledger_lib.Ledger(tracking_uri)
  time.sleep(max(0.0, start - time.time()))
  try:
    charge.charge(ledger, entry, new_ledger=True)
  except ConfigError as error:
    return f"refused: {error}"
  return "ran"


def _warm() -> None:
  time.sleep(1)  # Busy: the next warm-up goes to another process.


class Racers:
  """A pool of spawned processes that charge at once."""

  def __init__(self, pool: concurrent.futures.ProcessPoolExecutor,
               count: int):
    self._pool, self._count = pool, count

  def race(self, tracking_uri: str, identity: str, budget: float,
           racers: dict[str, dict[str, str | None]]) -> dict[str, str]:
    """Each racer (its charge's name: its environment) charges `identity`
    at one instant; what became of each, by name."""
    assert len(racers) <= self._count
    start = time.time() + _LEAD_S
    futures = {name: self._pool.submit(
        _charge_at, start, env, tracking_uri,
        run_entry(identity, name, budget)) for name, env in racers.items()}
    return {name: future.result() for name, future in futures.items()}


@contextlib.contextmanager
def racers(count: int) -> Iterator[Racers]:
  """`count` racer processes, each having imported tan_tune."""
  with concurrent.futures.ProcessPoolExecutor(
      count, mp_context=multiprocessing.get_context("spawn")) as pool:
    for future in [pool.submit(_warm) for _ in range(count)]:
      future.result()
    yield Racers(pool, count)
