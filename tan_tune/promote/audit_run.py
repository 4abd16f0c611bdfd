"""Running an audit plan (`audit_plan.py`) and recording what it found.

In order:

0. An audit on private data is charged to the dataset's ledger before it
   trains (`promote/private_train.py`), as `audit/<attempt>`; one on
   public data spends nothing and says so.
1. The audit run on Ray Train (`ray_train.fit`), inside the boundary of a
   private run (`release/boundary.py`): secret sampling and noise,
   owner-only files, temp folders removed on every node. Its checkpoints live in a
   folder of their own under `storage`, deleted when the audit ends.
2. The scores of the canaries from the final model, the guesses, eps_lb per
   kind of canary (`audit_plan.bounds`).
3. An MLflow run tagged `tan_tune.kind = audit`: the plan's public facts, eps
   beside eps_lb and the ceiling, r and W per kind, and the histogram of the
   scores of included against excluded canaries.

An audit is not resumed: its canary draw lives in memory only, so a killed
audit is a failed MLflow run, and the next one draws new canaries.
"""

import dataclasses
import json
import pathlib
import shutil
import time
from typing import Any

import matplotlib
from mlflow import MlflowClient
import numpy as np

from tan_tune import mlflow_store
from tan_tune.privacy import audit
from tan_tune.promote import audit_plan
from tan_tune.promote import private_train
from tan_tune.promote import ray_train
from tan_tune.release import boundary
from tan_tune.release import release
from tan_tune.training import canaries as canaries_lib

matplotlib.use("Agg")  # Files only; the driver may have no display.
from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top

KIND = "audit"
HISTOGRAM = "canary_scores.png"
SUMMARY = "audit.json"
_LABELS = {canaries_lib.INPUT: "input canaries (black box): -loss",
           canaries_lib.GRADIENT: "gradient canaries (white box):"
                                  " -(theta_T - theta_0)[j]"}


@dataclasses.dataclass(frozen=True)
class AuditOutcome:
  """A finished audit.

  Attributes:
    plan: what ran.
    run_id: its MLflow run.
    bounds: eps_lb, ceiling, r and W per kind of canary.
    metrics: the audit run's last evaluation (held-out accuracy, eps).
    seconds: wall time of the audit run, Ray Train's start-up included;
      None on private data, where it would time the private batches.
  """

  plan: audit_plan.AuditPlan
  run_id: str
  bounds: dict[str, audit.Bound]
  metrics: dict[str, Any]
  seconds: float | None

  def as_dict(self) -> dict[str, Any]:
    return {**self.plan.as_dict(), "run_id": self.run_id,
            "seconds": self.seconds,
            "bounds": {kind: found.as_dict()
                       for kind, found in self.bounds.items()}}


def run_audit(plan: audit_plan.AuditPlan, tracking_uri: str,
              storage: pathlib.Path, workers: int = 1, cpus: float = 1,
              gpus_per_worker: float = 0, address: str | None = None,
              target_epsilon: float | None = None,
              new_ledger: bool = False,
              out: release.Release | None = None) -> AuditOutcome:
  """Trains the audit run, scores its canaries and logs it to MLflow
  through `out` (`release.py`; a new one when None), which the caller seals.

  Raises:
    ConfigError: no Ray cluster at `address`; a private audit the ledger
      refuses.
  """
  folder = storage.resolve() / f"{KIND}-{plan.name}-{time.strftime('%Y%m%d-%H%M%S')}"
  client = MlflowClient(tracking_uri)
  if plan.private:
    boundary.require_private_ray(address)  # Refused before the charge.
    private_train.charge(plan.config, tracking_uri, None, target_epsilon,
                         new_ledger, kind=KIND,
                         training_size=plan.dataset_size)
  # Made before the run's records: its creation would date them.
  experiment = mlflow_store.experiment_id(client, tracking_uri,
                                          f"{plan.name}-{KIND}")
  out = out or release.Release()
  out.covers(storage, tracking_uri)
  if plan.private:
    out.warn_if_stat_able()
  run_id = _start_run(client, experiment, plan, out)
  try:
    folder.mkdir(mode=0o700, parents=True)
    with boundary.private_run(boundary.run_key(KIND, folder),
                              address) as private:
      start = time.monotonic()
      result = ray_train.fit(plan.config, workers=workers, cpus=cpus,
                             gpus_per_worker=gpus_per_worker,
                             storage=folder, key=private.key)
      seconds = None if plan.private else time.monotonic() - start
    scores = {kind: np.asarray(values)
              for kind, values in result["canary_scores"].items()}
    outcome = AuditOutcome(plan, run_id, audit_plan.bounds(plan, scores),
                           result["metrics"], seconds)
    _log_outcome(client, outcome, scores, folder, out)
  except BaseException:
    out.set_tags(client, run_id, KIND, {mlflow_store.STATUS_TAG: "failed"})
    out.end_run(client, run_id, "FAILED")
    raise
  finally:
    shutil.rmtree(folder, ignore_errors=True)
  out.set_tags(client, run_id, KIND, {mlflow_store.STATUS_TAG: "finished"})
  out.end_run(client, run_id)
  return outcome


def _start_run(client: MlflowClient, experiment: str,
               plan: audit_plan.AuditPlan, out: release.Release) -> str:
  epsilon = plan.epsilon()
  tags = {
      mlflow_store.STATUS_TAG: "running",
      "tan_tune.audited": plan.source,
      "tan_tune.base": plan.config.canaries.base,
      # On private data: a private run, charged to the dataset's ledger.
      "tan_tune.private": str(plan.private).lower(),
      "tan_tune.accountant": epsilon.accountant,
      "tan_tune.adjacency": plan.config.privacy.adjacency,
      "tan_tune.sampling": plan.config.privacy.scheme.describe(
          plan.config.privacy.batch_size),
  }
  run_id = out.create_run(client, experiment, KIND, f"{KIND}-{plan.name}",
                          tags)
  out.log_params(client, run_id, KIND, plan.as_dict())
  return run_id


def _log_outcome(client: MlflowClient, outcome: AuditOutcome,
                 scores: dict[str, np.ndarray], folder: pathlib.Path,
                 out: release.Release) -> None:
  run_id, plan = outcome.run_id, outcome.plan
  out.log_metrics(client, run_id, KIND, {
      "epsilon": plan.epsilon().epsilon,
      "audited_epsilon": plan.audited_epsilon().epsilon,
      **{key: outcome.metrics[key] for key in ("accuracy", "ema_accuracy")
         if key in outcome.metrics},
      **{f"{kind}_{key}": getattr(found, key)
         for kind, found in outcome.bounds.items()
         for key in ("epsilon_lower_bound", "ceiling",
                     "fdp_epsilon_lower_bound", "fdp_ceiling", "guesses",
                     "correct")}})
  (folder / SUMMARY).write_text(json.dumps(outcome.as_dict(), indent=2))
  out.log_artifact(client, run_id, KIND, folder / SUMMARY)
  out.log_artifact(client, run_id, KIND, draw_histogram(
      scores, plan.config.canaries.included(), outcome.bounds,
      folder / HISTOGRAM), mlflow_store.PLOTS_FOLDER)


def draw_histogram(scores: dict[str, np.ndarray],
                   included: dict[str, np.ndarray],
                   bounds: dict[str, audit.Bound],
                   path: pathlib.Path) -> pathlib.Path:
  """Per kind, the scores of included against excluded canaries; the
  guessing thresholds drawn where the r guesses begin."""
  figure, axes = plt.subplots(1, len(scores), figsize=(5 * len(scores), 3.6),
                              squeeze=False)
  for ax, (kind, values) in zip(axes[0], scores.items()):
    kept = included[kind]
    bins = np.histogram_bin_edges(values, bins=40)
    ax.hist(values[kept], bins=bins, alpha=0.6, label="included (S = +1)")
    ax.hist(values[~kept], bins=bins, alpha=0.6, label="excluded (S = -1)")
    found = bounds[kind]
    ordered = np.sort(values)
    guessed_in = found.guesses // 2  # As `audit.bound` splits them.
    for threshold in (ordered[found.guesses - guessed_in - 1],
                      ordered[len(ordered) - guessed_in]):
      ax.axvline(threshold, color="black", linewidth=0.8, linestyle="--")
    ax.set_title(f"{kind}: {found.correct} of {found.guesses} right,"
                 f" eps_lb {found.epsilon_lower_bound:.2f}", fontsize=10)
    ax.set_xlabel(_LABELS[kind], fontsize=9)
    ax.set_ylabel("canaries")
    ax.legend(fontsize=8)
  figure.tight_layout()
  figure.savefig(path, dpi=110)
  plt.close(figure)
  return path
