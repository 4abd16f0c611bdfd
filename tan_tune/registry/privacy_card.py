"""A private model's privacy card: what its guarantee is, made of what its run
published.

The card reads the promoted run's MLflow record back (its params, tags and
metrics) through `release.ALLOW_LIST` for the run's kind, so it cannot hold
anything the run could not publish: `Published` refuses any other key. It
records, after "How to DP-fy ML" (Ponomareva et al. 2023, section 5.3): the
unit of privacy and adjacency; the sampler the code ran against the one the
accountant assumes; eps at delta for each accountant, delta against 1/N; the
triplet (N, B, sigma, S), C, q and eta; the clipping engine and the bound it
declares; what is released; how the tuning was accounted; the dataset's
ledger; an audit's eps_lb where one of this configuration ran; the public
normalisation; the starting weights' digest; the package's version and
commit. It is written as `privacy_card.json` and `privacy_card.md` on the
run, and as a registered version's description and tags. A private random
search's release has one too (`build_search`), read from its search run.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.metadata
import json
import pathlib
import re
import subprocess
import tempfile
from typing import Any

from mlflow import MlflowClient
from mlflow.entities import Run

from tan_tune import config_io
from tan_tune.release import release

JSON_FILE, MARKDOWN_FILE = "privacy_card.json", "privacy_card.md"
# A registered version's tags that say it has a card, and its eps at delta.
CARD_TAG, EPSILON_TAG, DELTA_TAG, ACCOUNTANT_TAG = (
    "privacy.card", "privacy.epsilon", "privacy.delta", "privacy.accountant")
PACKAGE = pathlib.Path(__file__).resolve().parent.parent
UNIT = ("example-level: one training example (an input with its label) is"
        " what the guarantee protects")


def code_tags() -> dict[str, str]:
  """The package's version and git commit ('unknown' outside a checkout),
  for a private run's tags and so its card."""
  try:
    commit = subprocess.run(
        ["git", "-C", str(PACKAGE), "rev-parse", "HEAD"], capture_output=True,
        text=True, check=True, timeout=10).stdout.strip()
  except (OSError, subprocess.SubprocessError):
    commit = "unknown"
  return {"tan_tune.package_version": importlib.metadata.version("tan_tune"),
          "tan_tune.git_commit": commit}


class Published:
  """A finished private run's record, read only through its allow-list."""

  def __init__(self, run: Run, kind: str):
    self.run_id, self.kind = run.info.run_id, kind
    self._params, self._tags = run.data.params, run.data.tags
    self._metrics = run.data.metrics
    self._allowed = release.ALLOW_LIST[kind]

  @classmethod
  def stated(cls, kind: str, params: dict[str, Any],
             tags: dict[str, str]) -> Published:
    """The record of a run that no MLflow run holds (`tan-tune train`'s):
    its nested `params` as MLflow would store them, flat and as text."""
    record = cls.__new__(cls)
    record.run_id, record.kind = None, kind
    record._params = {key: str(value)
                      for key, value in config_io.flatten(params).items()}
    record._tags, record._metrics = tags, {}
    record._allowed = release.ALLOW_LIST[kind]
    return record

  def param(self, key: str) -> str | None:
    if key.split(".")[0] not in self._allowed.params:
      raise release.NotReleasable(f"param {key} of a private {self.kind} run")
    return self._params.get(key)

  def number(self, key: str) -> float | None:
    value = self.param(key)
    return None if value in (None, "None") else float(value)

  def tag(self, key: str) -> str | None:
    self._check(self._allowed.tags, "tag", key)
    return self._tags.get(key)

  def metric(self, key: str) -> float | None:
    self._check(self._allowed.metrics, "metric", key)
    return self._metrics.get(key)

  def params_under(self, prefix: str) -> dict[str, str]:
    """Params '<prefix>.<rest>' by rest (the accountants under
    'privacy.epsilon', say)."""
    self.param(prefix)
    return {key[len(prefix) + 1:]: value for key, value in self._params.items()
            if key.startswith(prefix + ".")}

  def _check(self, pattern: str, what: str, key: str) -> None:
    if not re.fullmatch(pattern, key):
      raise release.NotReleasable(f"{what} {key} of a private {self.kind} run")


@dataclasses.dataclass(frozen=True)
class PrivacyCard:
  """The card's fields, as `as_dict` writes them (see the module doc)."""

  fields: dict[str, Any]

  @property
  def epsilon(self) -> float:
    """eps at delta by the default accountant: the one the gate used."""
    return self.fields["epsilon"][self.fields["default_accountant"]]

  def as_dict(self) -> dict[str, Any]:
    return self.fields

  def as_json(self) -> str:
    return json.dumps(self.fields, indent=2)

  def tags(self) -> dict[str, str]:
    """A registered version's tags: the card's headline, flat."""
    f = self.fields
    return {CARD_TAG: JSON_FILE, EPSILON_TAG: f"{self.epsilon:.6g}",
            DELTA_TAG: f"{f['delta']:.6g}",
            ACCOUNTANT_TAG: f["default_accountant"],
            "privacy.adjacency": f["adjacency"],
            "privacy.sampler": f["sampling"]["sampler"],
            "privacy.ledger_epsilon": f"{f['ledger']['composed_epsilon']:.6g}",
            "privacy.tuning": f["tuning"]["mode"],
            "tan_tune.run_id": f["run_id"]}

  def log(self, out: release.Release, client: MlflowClient, run_id: str,
          kind: str) -> None:
    """`JSON_FILE` and `MARKDOWN_FILE` on the run, through its release."""
    out.log_json(client, run_id, kind, self.fields, JSON_FILE)
    with tempfile.TemporaryDirectory() as folder:
      markdown = pathlib.Path(folder) / MARKDOWN_FILE
      markdown.write_text(self.as_markdown())
      out.log_artifact(client, run_id, kind, markdown)

  def write(self, folder: pathlib.Path) -> None:
    """`JSON_FILE` and `MARKDOWN_FILE` in `folder`, beside what they are
    about (a private `train`'s checkpoint)."""
    (folder / JSON_FILE).write_text(self.as_json())
    (folder / MARKDOWN_FILE).write_text(self.as_markdown())

  def as_markdown(self) -> str:
    f = self.fields
    t, s, c = f["triplet"], f["sampling"], f["clipping"]
    audit = f["audit"]
    lines = [
        f"# Privacy card: ({self.epsilon:.4g}, {f['delta']:.3g})-DP",
        "",
        f"- **Unit of privacy**: {f['unit']}; {f['adjacency']} adjacency.",
        f"- **eps at delta = {f['delta']:.3g}** ({f['delta_times_n']:.3g}/N):"
        + ", ".join(f" {name.upper()} {eps:.4f}"
                    for name, eps in f["epsilon"].items())
        + f" (gate: {f['default_accountant'].upper()}).",
        f"- **Sampling**: {s['described']}; the code drew {s['code']},"
        f" the accountant assumes {s['accountant']}:"
        f" {'they match' if s['matches'] else 'THEY DIFFER'}.",
        f"- **Run**: N = {t['N']}, B = {t['B']}, sigma = {t['sigma']:.6g},"
        f" S = {t['S']}, C = {t['C']:g}, q = {t['q']:.4g},"
        f" eta = {t['eta']:.4g}.",
        f"- **Clipping**: {c['engine']} engine, per-example norm bound"
        f" {c['bound']}.",
        f"- **Released**: {f['released']['weights']}; metrics matching"
        f" `{f['released']['metrics']}` only.",
        f"- **Tuning** ({f['tuning']['mode']}): {f['tuning']['guarantee']}.",
        f"- **Ledger**: the dataset's composed eps with this run"
        f" {f['ledger']['composed_epsilon']:.4f} of budget"
        f" {f['ledger']['budget']:g} ({f['ledger']['accountant']}).",
        "- **Audit**: " + (
            f"a one-run audit of this configuration found eps_lb ="
            f" {audit:.3f}" if audit is not None else
            "none of this configuration in the store when registered"
            " (`tan-tune registry` shows any later one)" if f["run_id"]
            else "not looked up (`tan-tune audit` audits a configuration)")
        + ".",
        f"- **Normalisation**: mean {f['normalisation']['mean']}, std"
        f" {f['normalisation']['std']}: declared constants, not computed"
        " from the private data.",
        "- **Starting weights**: " + (
            f"sha256 {f['starting_weights_sha256']}"
            if f["starting_weights_sha256"] else "a random initialisation")
        + ".",
        f"- **Code**: tan_tune {f['package']['version']}, commit"
        f" {f['package']['git_commit']}"
        + (f"; MLflow run {f['run_id']}." if f["run_id"] else "."),
    ]
    return "\n".join(lines) + "\n"


def build(record: Published, audit: float | None,
          released: str | None = None) -> PrivacyCard:
  """The card of a promoted run's `record`; `audit`: eps_lb of an audit of
  this configuration, if one ran; `released`: what it releases, if not its
  MLflow Model's weights."""
  accountants = {name.rsplit(".", 1)[0]: float(value) for name, value
                 in record.params_under("privacy.epsilon").items()
                 if name.endswith(".epsilon")}
  return _card(
      record, "privacy", accountants, record.param("privacy.default_accountant"),
      code_sampler=record.param("reference_run.privacy.sampling"),
      clip_norm=record.number("reference_run.privacy.clip_norm"),
      # 'auto' until the first evaluation tags the engine it chose.
      engine=record.tag("tan_tune.clipping") or (
          f"{record.param('reference_run.clipping')} (the run's tag"
          " tan_tune.clipping names the engine it chose)"),
      tuning={"mode": record.param("tuning_privacy"),
              "guarantee": record.param("tuning_guarantee")},
      audit=audit, released=released)


def build_train(record: Published) -> PrivacyCard:
  """The card of a private `tan-tune train` run's last checkpoint, from
  what the run states (`Published.stated`)."""
  return build(record, audit=None, released=(
      "the final checkpoint only (its raw and EMA weights and the"
      " optimiser's state, no generator state; sealed, read it with"
      " tan_tune.api.load_checkpoint)"))


def build_search(record: Published) -> PrivacyCard:
  """The card of a private random search's release, from its search run's
  `record`: the whole search's eps (every trial a private run at the
  reference triplet, their number secret), whichever trial is released."""
  accountant = record.param("search_epsilon.accountant")
  count = record.params_under("trial_count")
  return _card(
      record, "reference",
      {accountant: record.number("search_epsilon.epsilon")}, accountant,
      # Each trial runs the reference triplet's own sampler.
      code_sampler=record.param("reference.sampler"),
      clip_norm=record.number("reference.clip_norm"),
      engine=_search_engine(record.param("reference.clipping")),
      tuning={"mode": record.param("tuning_privacy"),
              "guarantee": (f"{record.param('search_epsilon.describe')} for"
                            " the whole search, its best trial alone released;"
                            f" K ~ {count['distribution']} of mean"
                            f" {count['mean']}, drawn secretly;"
                            f" {_selection(record)}")},
      audit=None)


def _selection(record: Published) -> str:
  """How a private search chose its release, and so what its test
  accuracy is worth."""
  if record.param("select_on") == "validation":
    return (f"trials ranked by a DP score: correct predictions on"
            f" {record.param('validation_fraction')} of the private training"
            " data held out by a secret key, plus Gaussian noise of standard"
            f" deviation {record.param('score_noise')} (in the eps); the"
            " test split measured the release alone")
  return ("trials ranked on the test split: the released test accuracy"
          " is optimistic")


def _search_engine(rule: str) -> str:
  """The search file's clipping rule; 'auto' is resolved in each trial."""
  return (f"{rule} (each trial's: fast clipping where it covers the model,"
          " else per-example gradients)" if rule == "auto" else rule)


def _card(record: Published, privacy: str, accountants: dict[str, float],
          default_accountant: str, *, code_sampler: str, clip_norm: float,
          engine: str, tuning: dict[str, str],
          audit: float | None, released: str | None = None) -> PrivacyCard:
  """The card's fields; the triplet and its sampling are the params under
  `privacy` ('privacy' of a promoted run, 'reference' of a search)."""
  n = int(record.number(f"{privacy}.dataset_size"))
  delta = record.number(f"{privacy}.delta")
  served = record.params_under("served_model")
  sampler = record.param(f"{privacy}.sampler")
  projections = record.param(f"{privacy}.jl_projections")
  return PrivacyCard({
      "run_id": record.run_id,
      "unit": UNIT,
      "adjacency": record.param(f"{privacy}.adjacency"),
      "epsilon": accountants,
      "default_accountant": default_accountant,
      "delta": delta,
      "delta_times_n": delta * n,
      "sampling": {"sampler": sampler, "code": code_sampler,
                   "accountant": sampler, "matches": code_sampler == sampler,
                   "described": record.param(f"{privacy}.sampling")},
      "triplet": {"N": n, "B": int(record.number(f"{privacy}.batch_size")),
                  "sigma": record.number(f"{privacy}.noise_multiplier"),
                  "S": int(record.number(f"{privacy}.steps")),
                  "C": clip_norm,
                  "q": record.number(f"{privacy}.sampling_rate"),
                  "eta": record.number(f"{privacy}.eta")},
      "clipping": {
          "engine": engine,
          "bound": ("C (exact)" if projections in (None, "None") else
                    f"C Z_r with r = {projections} JL projections"
                    " (estimated norms)")},
      "released": {
          "weights": released or (
              f"the final weights only ({served['weights']},"
              f" those of {served['metric']})"),
          "metrics": release.ALLOW_LIST[record.kind].metrics},
      "tuning": tuning,
      "ledger": {"composed_epsilon": record.number("ledger.total_epsilon"),
                 "budget": record.number("ledger.budget"),
                 "accountant": record.param("ledger.accountant")},
      "audit": audit,
      "normalisation": {key: list(ast.literal_eval(served[f"inputs.{key}"]))
                        for key in ("mean", "std")},
      "starting_weights_sha256": _none(record.param("model_weights_sha256")),
      "package": {"version": record.tag("tan_tune.package_version"),
                  "git_commit": record.tag("tan_tune.git_commit")},
  })


def _none(value: str | None) -> str | None:
  return None if value in (None, "None") else value
