"""The one way out of a private run: a declared allow-list, timed at the start.

A run that prints an epsilon (a promotion, a private random search, a private
`tan-tune train`, a private audit) may publish only what its accountant
covers. Everything such a run sends to MLflow goes through a `Release`,
which checks each param, tag, metric and artifact against `ALLOW_LIST` for
the run's kind and refuses anything else (`NotReleasable`: a bug, not bad
input). Times are facts too: a duration counts steps whose length grows
with the secret batch sizes, and a private search's counts its trials. So
a `Release` stamps every record with the run's start `t_0`:

- runs start at t_0 and end at t_0 (MLflow's end_time = start_time);
- every metric is logged at timestamp t_0;
- every file the run leaves (its folders, a local MLflow store's database
  and artifacts) has its mtime set back to t_0 by `seal`, folders included,
  since a folder's mtime moves whenever an entry is added or removed;
- with a release time (`release_time.py`, `--release-at`), the command
  holds its last writes until then (`wait`), and `seal` touches every file
  it covers, so that their ctimes, which no one can set back, tell that time
  and not the run's end.

What the terminal shows is the flows' own (plans, one line per evaluation
with step, held-out accuracy and eps); it never shows a clock.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import tempfile
import time
import urllib.parse
from typing import Any, Iterable

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from tan_tune import config_io
from tan_tune import mlflow_store
from tan_tune.release import release_time

_SQLITE = "sqlite:///"


@dataclasses.dataclass(frozen=True)
class AllowList:
  """What one kind of private MLflow run may hold (a private `train`, which
  logs none: what its checkpoint's card may state).

  Attributes:
    params: the top-level names of its params (before the first dot).
    tags: a pattern every tag key must match.
    metrics: a pattern every metric key must match.
    artifacts: a pattern every artifact path ('folder/name') must match.
  """

  params: frozenset[str]
  tags: str
  metrics: str
  artifacts: str


# The accounting facts every private run names beside its eps.
_ACCOUNTING_TAGS = (r"tan_tune\.(kind|status|private|simulated|accountant|"
                    r"adjacency|sampling|tuning_privacy|evaluated_on|"
                    r"clipping)")
_PLAN = frozenset({
    "search_run_id", "trial_id", "trial_run_id", "params", "reference_run",
    "privacy", "tuning_privacy", "tuning_guarantee", "default_accountant",
    "target_epsilon", "compute_vs_trial", "workers", "gpus_per_worker",
    "time_estimate", "calibration_seconds", "winner_search_score",
    "select_on", "ledger", "dataset_in_ledger", "new_ledger", "peak_batch",
    "calibration_seeds", "model_weights_sha256", "calibration_vs_reference",
    "dataset_ledger_id", "served_model", "front_end"})
# An MLflow Model of the released weights (`served_model.py`): a program,
# or a factory's Python files with its arguments and the weights.
_MLFLOW_MODEL = (r"mlflow_model/(MLmodel|conda\.yaml|python_env\.yaml|"
                 r"requirements\.txt|(serving_)?input_example\.json|"
                 r"artifacts/(program\.pt2|weights\.pt|factory\.json)|"
                 r"pyfunc_(program|factory)\.py|code/[\w/.-]+\.py)")
_SEARCH = frozenset({
    "reference", "tuning_privacy", "default_accountant", "metric",
    "select_on", "validation_fraction", "score_noise", "search_epsilon",
    "trial_count", "served_model", "model_weights_sha256", "ledger"})
_LEDGER = frozenset({
    "dataset_name", "dataset_size", "batch_size",
    "noise_multiplier", "steps", "delta", "epsilon", "budget", "accountant",
    "adjacency", "sampler", "truncation_stds", "sampling",
    "jl_projections", "trial_count_distribution", "trial_count_mean",
    "trial_count_shape", "trial_score_noise", "config_sha256", "custody",
    "key_id", "sequence"})
_AUDIT = frozenset({
    "source", "canaries", "kinds", "base", "guesses", "confidence", "delta",
    "universe_size", "training_size", "audited_size", "batch_size",
    "audited_batch_size", "noise_multiplier", "steps", "clip_norm",
    "clipping", "epsilon", "accountant", "adjacency", "sampling",
    "audited_epsilon"})

# What a private `tan-tune train` states about its checkpoint (no MLflow
# run holds it): its card's fields.
_TRAIN = frozenset({
    "reference_run", "privacy", "tuning_privacy", "tuning_guarantee",
    "ledger", "served_model", "model_weights_sha256"})

ALLOW_LIST: dict[str, AllowList] = {
    "promoted": AllowList(
        _PLAN,
        tags=(rf"{_ACCOUNTING_TAGS}|tan_tune\.(search_run_id|source_trial_id|"
              r"source_trial_run_id|search_space|worker_node_ids|"
              r"package_version|git_commit)|"
              r"mlflow\.\w+"),
        metrics=(r"step|(ema_|augtest_)?accuracy|epsilon|"
                 r"(planned|final)_epsilon_[\w-]+|final_eps_tan|"
                 r"predicted_\w+|prediction_error"),
        artifacts=(r"model/model\.pt|plots/learning_curve\.png|privacy\.json|"
                   rf"scaling_law/scaling_law\.(json|png)|{_MLFLOW_MODEL}|"
                   r"privacy_card\.(json|md)")),
    "search": AllowList(
        _SEARCH,
        tags=rf"{_ACCOUNTING_TAGS}|tan_tune\.\w+|mlflow\.\w+",
        metrics=(r"search_epsilon|reference_eps_tan|reference_epsilon_[\w-]+|"
                 r"released_\w*accuracy|released_validation_score"),
        artifacts=(r"model\.pt|best\.json|search_space\.yaml|resolved\.json|"
                   rf"{_MLFLOW_MODEL}|privacy_card\.(json|md)")),
    "ledger-entry": AllowList(
        _LEDGER,
        tags=(r"tan_tune\.(kind|dataset_identity|ledger_id|promotion|"
              r"promoted_run_id|withdrawn|mac)|mlflow\.\w+"),
        metrics=r"epsilon",
        artifacts=r"(?!)"),
    "audit": AllowList(
        _AUDIT,
        tags=rf"{_ACCOUNTING_TAGS}|tan_tune\.(audited|base)|mlflow\.\w+",
        metrics=(r"(audited_)?epsilon|(ema_)?accuracy|"
                 r"(input|gradient)_((fdp_)?(epsilon_lower_bound|ceiling)|"
                 r"guesses|correct)"),
        artifacts=r"audit\.json|plots/canary_scores\.png"),
    "train": AllowList(
        _TRAIN,
        tags=r"tan_tune\.(clipping|package_version|git_commit)",
        # The checkpoint's history: `run_state.PRIVATE_METRICS`.
        metrics=(r"step|(ema_|augtest_)?accuracy|epsilon|accountant|"
                 r"adjacency|sampling|private|simulated|evaluated_on|"
                 r"clipping"),
        artifacts=r"privacy_card\.(json|md)"),
}


class NotReleasable(RuntimeError):
  """A private run tried to publish something its allow-list leaves out."""


def log_new_params(client: MlflowClient, run_id: str,
                   params: dict[str, Any]) -> None:
  """Nested params under dotted keys; a resumed run skips those it has
  (MLflow refuses to change a param)."""
  logged = client.get_run(run_id).data.params
  mlflow_store.log_batch(client, run_id, params={
      key: value for key, value in config_io.flatten(params).items()
      if key not in logged})


class Release:
  """Everything one private run publishes, checked and timed at its start.

  Attributes:
    started: t_0, the run's start in seconds since the epoch.
    release_at: when its last writes may happen; None: as soon as it ends.
  """

  def __init__(self, started: float | None = None,
               release_at: release_time.ReleaseAt | None = None):
    self.started = time.time() if started is None else started
    self.release_at = release_at
    self._folders: list[pathlib.Path] = []
    self._stores: list[str] = []

  @property
  def started_ms(self) -> int:
    return int(self.started * 1000)

  @classmethod
  def of_run(cls, client: MlflowClient, run_id: str) -> Release:
    """The release of a run already started (a Ray worker's view)."""
    return cls(client.get_run(run_id).info.start_time / 1000)

  def resume(self, client: MlflowClient, run_id: str) -> None:
    """A resumed run keeps its first start as t_0."""
    self.started = client.get_run(run_id).info.start_time / 1000

  # MLflow.

  def create_run(self, client: MlflowClient, experiment_id: str, kind: str,
                 run_name: str, tags: dict[str, str]) -> str:
    """A private run of `kind`, started at t_0; its tags checked."""
    self._check(kind, "tags", tags)
    run = client.create_run(experiment_id, start_time=self.started_ms,
                            run_name=run_name,
                            tags={"tan_tune.kind": kind, **tags})
    return run.info.run_id

  def log_params(self, client: MlflowClient, run_id: str, kind: str,
                 params: dict[str, Any]) -> None:
    """Nested params under dotted keys; a resumed run skips those it has
    (MLflow refuses to change a param)."""
    flat = config_io.flatten(params)
    self._check_params(kind, flat)
    log_new_params(client, run_id, flat)

  def log_param_once(self, client: MlflowClient, run_id: str, kind: str,
                     key: str, value: str) -> str:
    """Sets param `key` to `value` unless it holds another value already:
    MLflow never changes a param, and its store refuses the second of two
    writes at once, so the first writer wins.

    Returns:
      The value the param holds: `value`, or the first writer's.
    """
    self._check_params(kind, [key])
    try:
      client.log_param(run_id, key, value)
    except MlflowException as error:
      if error.error_code != "INVALID_PARAMETER_VALUE":
        raise
    return client.get_run(run_id).data.params[key]

  def set_tags(self, client: MlflowClient, run_id: str, kind: str,
               tags: dict[str, str]) -> None:
    self._check(kind, "tags", tags)
    mlflow_store.log_batch(client, run_id, tags=tags)

  def log_metrics(self, client: MlflowClient, run_id: str, kind: str,
                  metrics: dict[str, float], step: int = 0) -> None:
    """Numbers at timestamp t_0: the time of an evaluation would time the
    steps before it."""
    self._check(kind, "metrics", metrics)
    mlflow_store.log_batch(client, run_id, metrics=metrics, step=step,
              timestamp=self.started_ms)

  def log_artifact(self, client: MlflowClient, run_id: str, kind: str,
                   path: pathlib.Path, folder: str | None = None) -> None:
    """A file of the run, its mtime set to t_0 first (a local store copies
    it with its times)."""
    name = f"{folder}/{path.name}" if folder else path.name
    self._check(kind, "artifacts", {name: None})
    os.utime(path, (self.started, self.started))
    client.log_artifact(run_id, str(path), folder)
    root = urllib.parse.urlparse(client.get_run(run_id).info.artifact_uri)
    if root.scheme in ("", "file"):  # A local store: its copy is sealed too.
      self._folders.append(pathlib.Path(root.path))

  def log_folder(self, client: MlflowClient, run_id: str, kind: str,
                 folder: pathlib.Path) -> None:
    """Every file under `folder`, as artifacts under its name, each checked
    first; their mtimes and the folders' set to t_0."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    self._check(kind, "artifacts", {
        f"{folder.name}/{p.relative_to(folder).as_posix()}" for p in files})
    for path in [*files, *(p for p in folder.rglob("*") if p.is_dir()),
                 folder]:
      os.utime(path, (self.started, self.started))
    client.log_artifacts(run_id, str(folder), folder.name)
    root = urllib.parse.urlparse(client.get_run(run_id).info.artifact_uri)
    if root.scheme in ("", "file"):  # A local store: its copy is sealed too.
      self._folders.append(pathlib.Path(root.path))

  def log_json(self, client: MlflowClient, run_id: str, kind: str,
               content: Any, name: str) -> None:
    """`content` as the JSON artifact `name`, written owner-only."""
    with tempfile.TemporaryDirectory() as folder:
      path = pathlib.Path(folder) / name
      path.write_text(json.dumps(content, indent=2, default=str))
      self.log_artifact(client, run_id, kind, path)

  def end_run(self, client: MlflowClient, run_id: str,
              status: str = "FINISHED") -> None:
    """Ends the run at t_0: its end time would time it."""
    client.set_terminated(run_id, status, end_time=self.started_ms)

  # Files.

  def covers(self, *folders: pathlib.Path | str) -> None:
    """Folders, and local MLflow stores as URIs, that `seal` stamps."""
    for folder in folders:
      if isinstance(folder, str) and "://" in folder:
        self._stores.append(folder)
      else:
        self._folders.append(pathlib.Path(folder))

  def warn_if_stat_able(self) -> None:
    """Without a release time, one line names the stores and folders it
    covers that other users can `stat`: a run under way (its input checked,
    its charge made) calls it once."""
    if self.release_at is None:
      databases = (_database(uri) for uri in self._stores)
      release_time.warn_if_stat_able(
          [*filter(None, databases), *self._folders])

  def wait(self) -> None:
    """Holds the release's last writes (the seal, a log's deletion) until
    its release time, if it has one: a run that ended normally calls it,
    released or not (a search that drew K = 0 releases nothing)."""
    if self.release_at is not None:
      release_time.wait_until(self.release_at.moment(self.started))

  def seal(self) -> None:
    """Sets back to t_0 the mtime of everything the run changed in its
    folders and local stores, and of the folders above them up to the
    working directory: the last thing a private run does."""
    databases = [_database(uri) for uri in self._stores]
    tops = [pathlib.Path.cwd(), *(d.parent for d in databases if d)]
    stamped: list[pathlib.Path] = []
    for folder in self._folders:
      stamped += [folder, *_walk(folder), *_ancestors(folder, tops)]
    for database in filter(None, databases):
      # The database, its journal and the folders beside it (its ledger key).
      for side in database.parent.glob(f"{database.name}*"):
        stamped += [side, *_walk(side)]
      stamped += _ancestors(database, tops)
    # Children before their folders: stamping a file leaves the folder's
    # mtime alone, but keep the order safe for any filesystem.
    for path in sorted(set(stamped), key=lambda p: -len(p.parts)):
      self._stamp(path)

  def _stamp(self, path: pathlib.Path) -> None:
    try:
      info = path.lstat()
      if info.st_mtime > self.started:
        os.utime(path, (self.started, self.started), follow_symlinks=False)
      elif self.release_at is not None:
        # Its times as they are, its ctime now: set earlier (an artifact
        # stamped when logged), it would date the end of the run.
        os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns),
                 follow_symlinks=False)
    except (FileNotFoundError, PermissionError):
      pass  # Gone, or not ours: nothing of the run.

  def _check_params(self, kind: str, keys: Iterable[str]) -> None:
    allowed = ALLOW_LIST[kind].params
    refused = sorted(k for k in keys if k.split(".")[0] not in allowed)
    if refused:
      raise NotReleasable(f"params {refused} of a private {kind} run")

  def _check(self, kind: str, what: str, values: Iterable[str]) -> None:
    pattern = re.compile(getattr(ALLOW_LIST[kind], what))
    refused = sorted(k for k in values if not pattern.fullmatch(k))
    if refused:
      raise NotReleasable(f"{what} {refused} of a private {kind} run")


def _walk(folder: pathlib.Path) -> list[pathlib.Path]:
  return list(folder.rglob("*")) if folder.is_dir() else []


def _ancestors(path: pathlib.Path,
               tops: list[pathlib.Path]) -> list[pathlib.Path]:
  """The folders above `path` up to the highest of `tops` (the working
  directory, a store's folder) it lies under: adding or removing an entry
  moves a folder's mtime."""
  path = path.resolve()
  under = [top.resolve() for top in tops if top.resolve() in path.parents]
  if not under:
    return []
  highest = min(under, key=lambda top: len(top.parts))
  return [p for p in path.parents if p == highest or highest in p.parents]


def _database(uri: str) -> pathlib.Path | None:
  """A local sqlite store's database file; None for a server, which keeps
  its own files (its run and metric times are set through MLflow)."""
  if not uri.startswith(_SQLITE):
    return None
  return pathlib.Path(uri[len(_SQLITE):]).resolve()
