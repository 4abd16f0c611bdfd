"""A private model in MLflow's Model Registry: its versions, aliases, champion.

A promoted run registered under a name (`--register NAME`) becomes a version
whose description is its privacy card and whose tags are the card's headline
(`privacy_card.PrivacyCard.tags`); a finished one gets the alias `candidate`.
Aliases only: MLflow's stages are deprecated. The registry dates a version
when it is made and no client can set that time, so a private run registers
its version when it starts, before anything trains (the card is known by
then: the run's plan fixes every figure in it), and later sets only tags and
aliases, which carry no time: the registry says nothing of how long the run
took. `champion` moves onto a version only when it has a card, a trained
model and eps at its delta within the caller's limit (`move_champion`).
"""

from __future__ import annotations

import dataclasses
import re

from mlflow import MlflowClient
from mlflow.entities.model_registry import ModelVersion
from mlflow.exceptions import MlflowException

from tan_tune import mlflow_store
from tan_tune.registry import privacy_card
from tan_tune.registry import served_model

CANDIDATE, CHAMPION = "candidate", "champion"
RUNNING, FINISHED, FAILED = "running", "finished", "failed"
MODEL_DESCRIPTION = (
    "A differentially private model trained by tan_tune. Each version's"
    " description is its privacy card; `tan-tune registry NAME` lists eps,"
    " delta, accountant, test accuracy and audit side by side.")
_NO_CARD = ("{name} version {version} has no privacy card: it was not"
            " registered by tan-tune promote --register")
# An audit's figure: the larger eps_lb of its two kinds of canaries.
_AUDIT_METRICS = ("input_epsilon_lower_bound", "gradient_epsilon_lower_bound")
# What makes an audit one of the promoted run's configuration: its params
# against the promoted run's.
_AUDIT_MATCH = {"audited_batch_size": "reference_run.privacy.batch_size",
                "noise_multiplier": "reference_run.privacy.noise_multiplier",
                "steps": "reference_run.privacy.steps",
                "clip_norm": "reference_run.privacy.clip_norm",
                "clipping": "reference_run.clipping"}


NAME_PATTERN = r"[A-Za-z0-9][\w.-]*"
NAME_RULE = ("letters, digits, '.', '_' and '-', starting with a letter or a"
             " digit")


class RegistryRefused(Exception):
  """What the registry command refuses, in one line."""


@dataclasses.dataclass(frozen=True)
class VersionRow:
  """One version as `tan-tune registry` lists it.

  Attributes:
    version: its number.
    aliases: those pointing at it.
    status: its run's: running, finished or failed.
    epsilon: its card's eps; None without a card.
    delta: its card's delta; None without a card.
    accountant: the accountant of its card's eps; None without a card.
    metric: the run's headline test metric.
    accuracy: that metric's value.
    audit: eps_lb of an audit of the same configuration, if one ran.
  """

  version: str
  aliases: tuple[str, ...]
  status: str | None
  epsilon: float | None
  delta: float | None
  accountant: str | None
  metric: str | None
  accuracy: float | None
  audit: float | None

  @property
  def has_card(self) -> bool:
    return self.epsilon is not None


def register(client: MlflowClient, name: str, run_id: str,
             card: privacy_card.PrivacyCard) -> str:
  """The version of `name` (made if new) for the run's MLflow Model, its
  card as description and tags; its number. A resumed run finds its own."""
  registered = version_of_run(client, name, run_id)
  if registered:
    return registered
  try:
    client.get_registered_model(name)
  except MlflowException:
    client.create_registered_model(name, description=MODEL_DESCRIPTION)
  version = client.create_model_version(
      name, f"runs:/{run_id}/{served_model.FOLDER}", run_id=run_id,
      description=card.as_markdown(),
      tags={**card.tags(), mlflow_store.STATUS_TAG: RUNNING})
  return str(version.version)


def version_of_run(client: MlflowClient, name: str,
                   run_id: str) -> str | None:
  """The version of `name` registered for the run, if any (a resumed run
  keeps its own)."""
  found = client.search_model_versions(
      f"name = '{name}' and run_id = '{run_id}'")
  return str(found[0].version) if found else None


def finish(client: MlflowClient, name: str, version: str,
           finished: bool) -> None:
  """The run's end: its status, and `candidate` onto a finished version."""
  client.set_model_version_tag(name, version, mlflow_store.STATUS_TAG,
                               FINISHED if finished else FAILED)
  if finished:
    client.set_registered_model_alias(name, CANDIDATE, version)


def versions(client: MlflowClient, name: str) -> list[VersionRow]:
  """Every version of `name`, newest first.

  Raises:
    RegistryRefused: no registered model has that name.
  """
  _model(client, name)
  # A search's versions come without their aliases: each is read again.
  found = [client.get_model_version(name, v.version)
           for v in client.search_model_versions(f"name = '{name}'")]
  audits = _audits(client)
  return sorted((_row(client, v, audits) for v in found),
                key=lambda row: -int(row.version))


def move_champion(client: MlflowClient, name: str, version: str,
                  max_epsilon: float) -> VersionRow:
  """Points `champion` at the version, if it may be.

  Raises:
    RegistryRefused: an unknown model or version; a version without a card
      or without a trained model; eps over `max_epsilon`.
  """
  row = _known_version(client, name, version)
  if not row.has_card:
    raise RegistryRefused(_NO_CARD.format(name=name, version=version))
  if row.status != FINISHED:
    raise RegistryRefused(f"{name} version {version} has no trained model:"
                          f" its run is {row.status}")
  if row.epsilon > max_epsilon:
    raise RegistryRefused(
        f"{name} version {version} has eps = {row.epsilon:.4g} at delta ="
        f" {row.delta:.3g} ({row.accountant}), over --max-epsilon"
        f" {max_epsilon:g}")
  client.set_registered_model_alias(name, CHAMPION, row.version)
  return dataclasses.replace(row, aliases=tuple(sorted({*row.aliases,
                                                        CHAMPION})))


def card_text(client: MlflowClient, name: str, version: str) -> str:
  """The version's privacy card, as its description holds it.

  Raises:
    RegistryRefused: an unknown model or version, or one without a card.
  """
  row = _known_version(client, name, version)
  if not row.has_card:
    raise RegistryRefused(_NO_CARD.format(name=name, version=version))
  return client.get_model_version(name, row.version).description


def _known_version(client: MlflowClient, name: str,
                   version: str) -> VersionRow:
  rows = {row.version: row for row in versions(client, name)}
  if str(version) not in rows:
    raise RegistryRefused(
        f"{name} has no version {version}; it has"
        f" {', '.join(sorted(rows, key=int)) or 'none'}")
  return rows[str(version)]


def _model(client: MlflowClient, name: str) -> None:
  try:
    client.get_registered_model(name)
  except MlflowException:
    known = [m.name for m in client.search_registered_models()]
    raise RegistryRefused(
        f"no registered model {name!r}; the store has"
        f" {', '.join(sorted(known)) or 'none'}") from None


def _row(client: MlflowClient, version: ModelVersion,
         audits: list[tuple[dict[str, str], float]]) -> VersionRow:
  tags = version.tags
  number = (lambda key: float(tags[key]) if key in tags else None)
  metric = accuracy = audit = None
  try:
    run = client.get_run(version.run_id).data if version.run_id else None
  except MlflowException:  # Its run was deleted for good (`mlflow gc`).
    run = None
  if run:
    metric = run.params.get("served_model.metric")
    # A private search publishes its released trial's as released_<metric>.
    accuracy = (run.metrics.get(metric, run.metrics.get(f"released_{metric}"))
                if metric else None)
    audit = _audit_of(audits, run.params)
  return VersionRow(
      version=str(version.version), aliases=tuple(sorted(version.aliases)),
      status=tags.get(mlflow_store.STATUS_TAG),
      epsilon=(number(privacy_card.EPSILON_TAG)
               if privacy_card.CARD_TAG in tags else None),
      delta=number(privacy_card.DELTA_TAG),
      accountant=tags.get(privacy_card.ACCOUNTANT_TAG),
      metric=metric, accuracy=accuracy, audit=audit)


def audit_figure(client: MlflowClient,
                 params: dict[str, str]) -> float | None:
  """The largest eps_lb of a finished audit of the configuration whose
  promoted run has `params`; None when none ran."""
  return _audit_of(_audits(client), params)


def _audit_of(audits: list[tuple[dict[str, str], float]],
              params: dict[str, str]) -> float | None:
  matching = [figure for found, figure in audits
              if all(found.get(key) == params.get(mine)
                     for key, mine in _AUDIT_MATCH.items())]
  return max(matching, default=None)


def _audits(client: MlflowClient) -> list[tuple[dict[str, str], float]]:
  """Every finished audit in the store: its params and eps_lb."""
  experiments = [e.experiment_id for e in client.search_experiments()]
  runs = client.search_runs(
      experiments, filter_string=(
          f"tags.`{mlflow_store.KIND_TAG}` = 'audit' and"
          f" tags.`{mlflow_store.STATUS_TAG}` = '{FINISHED}'"))
  return [(run.data.params, max(run.data.metrics[key] for key in found))
          for run in runs
          if (found := [k for k in _AUDIT_METRICS if k in run.data.metrics])]


def valid_name(name: str) -> bool:
  """A name `models:/NAME@alias` URIs and shells take as it is."""
  return bool(re.fullmatch(NAME_PATTERN, name))
