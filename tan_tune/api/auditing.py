"""audit as a Python function: eps_lb from one run of the code, typed.

It does what `tan-tune audit` does, with the same checks, files and
boundaries (the command parses its arguments, calls `audit` and prints the
plan and the outcome): Ray's output goes to a log in `storage` unless
`verbose`, owner-only and deleted when the audit ends, and whatever the
audit changed is stamped at its start.
"""

import dataclasses
import os
import pathlib
from typing import Callable

from tan_tune import console as console_lib
from tan_tune import mlflow_store
from tan_tune import ray_cluster
from tan_tune.promote import audit_plan
from tan_tune.promote import audit_run
# Re-exported as the API's own, so that its reference renders the classes.
from tan_tune.promote.audit_plan import AuditPlan
from tan_tune.promote.audit_run import AuditOutcome
from tan_tune.release import boundary
from tan_tune.release import release
from tan_tune.training import canaries as canaries_lib

AUDIT_LOG = "audit.log"
"""Ray's output while the audit runs (unless `verbose`), in its `storage`."""
AUDIT_BASES = canaries_lib.BASES
"""What the audit run may train on beside its canaries (`base`): 'public',
the test split (nothing spent), or 'private', the training split (charged)."""
PUBLIC_BASE = canaries_lib.PUBLIC
"""The base that spends nothing, `audit`'s default: the test split."""


@dataclasses.dataclass(frozen=True)
class Audit:
  """An audit's plan and, once it ran, its outcome.

  Attributes:
    plan: the audited run, its canaries and guesses.
    outcome: the finished audit's eps_lb per kind of canary beside the
      accountant's eps; None for a plan only.
  """

  plan: AuditPlan
  outcome: AuditOutcome | None


def audit(target: str | os.PathLike, *, trial: str | None = None,
          canaries: int = 1000, guesses: int | None = None,
          confidence: float = 0.95, base: str = canaries_lib.PUBLIC,
          workers: int = 1, gpus_per_worker: float = 0.0,
          address: str | None = None,
          tracking_uri: str = mlflow_store.DEFAULT_TRACKING_URI,
          storage: str | os.PathLike = "runs",
          target_epsilon: float | None = None, new_ledger: bool = False,
          plan_only: bool = False,
          on_plan: Callable[[audit_plan.AuditPlan], None] | None = None,
          verbose: bool = False) -> Audit:
  """Plans the audit of `target`'s run and, unless `plan_only`, runs it.

  Args:
    target: a search file (its reference run), a search directory (its
      winner at the reference triplet) or a private trial config.
    trial: with a search directory, this trial (default: the best).
    canaries: m, the canaries of each kind.
    guesses: r, the guesses per kind; None for m / 5.
    confidence: of eps_lb.
    base: 'public' trains on the test split (nothing spent), 'private' on
      the training split (charged to the dataset's ledger).
    workers: the audit run's Ray Train workers.
    gpus_per_worker: the GPUs each worker holds (0: on CPUs).
    address: a Ray cluster; None starts an embedded local Ray.
    tracking_uri: the MLflow store the audit is logged (and a private one
      charged) to.
    storage: where the audit keeps its checkpoints and log while it runs.
    target_epsilon: with base 'private', the dataset's budget, for its
      first private run in this store (default: the one its ledger holds).
    new_ledger: with base 'private', start the dataset's ledger with this
      run (its first private run in this store).
    plan_only: return the plan without running it (`outcome` None).
    on_plan: called with the plan before the run starts (the command prints
      it there).
    verbose: show Ray's output instead of logging it.

  Raises:
    ConfigError: a bad option, a run that does not fit its data, no Ray
      cluster at `address`, or a private audit the ledger refuses.
  """
  plan = audit_plan.plan_audit(
      pathlib.Path(target), trial_id=trial, canaries=canaries,
      guesses=guesses, base=base, confidence=confidence,
      tracking_uri=tracking_uri)
  if on_plan:
    on_plan(plan)
  if plan_only:
    return Audit(plan, None)
  ray_cluster.resolve_and_probe(address)
  storage = pathlib.Path(storage)
  log = storage.resolve() / AUDIT_LOG
  out = release.Release()
  try:
    with boundary.owner_only_files(), console_lib.quiet_terminal(
        log, verbose):
      outcome = audit_run.run_audit(
          plan, tracking_uri, storage, workers=workers,
          gpus_per_worker=gpus_per_worker, address=address,
          target_epsilon=target_epsilon, new_ledger=new_ledger, out=out)
      ray_cluster.disconnect()
    log.unlink(missing_ok=True)
  finally:
    out.seal()  # Last: whatever the audit changed, stamped at its start.
  return Audit(plan, outcome)
