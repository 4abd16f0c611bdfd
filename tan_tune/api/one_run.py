"""train as a Python function: one DP-SGD run from a config, typed.

It does what `tan-tune train` does, with the same checks and boundaries
(the command parses its arguments, calls `train` and prints the result): a
private run (DP-SGD, not a simulation) is charged to the privacy ledger of
`tracking_uri` before anything trains, or refused; a checkpoint is resumed
only by the config and store it was charged in; its files are owner-only
and stamped at its start when it ends; its last checkpoint keeps no
generator state and leaves with its privacy card beside it
(`privacy_card.json` and `.md`); and its progress bar moves at evaluations
only, with no rate or clock, which would time its steps.
"""

import contextlib
import dataclasses
import os
import pathlib
from typing import Any, Mapping

import tqdm

from tan_tune import config_io
from tan_tune import mlflow_store
from tan_tune.api import references
from tan_tune.errors import ConfigError
from tan_tune.ledger import custody
from tan_tune.promote import private_train
from tan_tune.registry import privacy_card
from tan_tune.release import boundary
from tan_tune.release import release
from tan_tune.release import release_time
from tan_tune.training import checkpoint_file
from tan_tune.training import trial
from tan_tune.training import trial_config
# Re-exported as the API's own, so that its reference renders the function
# and the class themselves.
from tan_tune.training.checkpoint_file import load as load_checkpoint
from tan_tune.training.trial import TrialDiverged

Config = str | os.PathLike | Mapping[str, Any] | trial_config.TrialConfig


@dataclasses.dataclass(frozen=True)
class Training:
  """A finished run.

  Attributes:
    config: what ran.
    metrics: its last report: step, accuracies, loss, throughput, and the
      epsilon spent with its accountant, adjacency and sampling (`private`,
      `simulated` say what the epsilon is).
    history: every report, the last included.
    charge: the ledger entry that paid for a private run; None otherwise.
    card: a private run's privacy card (Markdown; its JSON beside it) in
      the checkpoint folder; None without one.
  """

  config: trial_config.TrialConfig
  metrics: dict[str, Any]
  history: list[dict[str, Any]]
  charge: str | None
  card: pathlib.Path | None = None


def train(config: Config, *, checkpoint_dir: str | os.PathLike | None = None,
          tracking_uri: str = mlflow_store.DEFAULT_TRACKING_URI,
          target_epsilon: float | None = None, new_ledger: bool = False,
          progress: bool = True,
          move_from: str | os.PathLike | None = None,
          release_at: release_time.ReleaseTime | None = None) -> Training:
  """Trains one model with DP-SGD, as `tan-tune train` does.

  Args:
    config: a trial config's YAML file, its content as a mapping (where
      `model.factory` and `dataset.factory` may be Python callables,
      `references.py`), or a `TrialConfig`.
    checkpoint_dir: checkpoint here at every evaluation; a checkpoint already
      there is resumed (a private run's only by the config and store it was
      charged in).
    tracking_uri: the MLflow store whose privacy ledger a private run is
      charged to.
    target_epsilon: the dataset's budget, for its first private run in this
      store (default: the budget its ledger holds).
    new_ledger: this store has no private run on the dataset yet: start its
      ledger with this run.
    progress: show a progress bar on stderr.
    move_from: the folder a private run's checkpoint was moved from (to
      `checkpoint_dir`, on another disk say): the run resumes in its new
      place, and the old folder is retired (`custody.py`).
    release_at: a private run's release time: its last writes (its files'
      seal) wait for it, so that their ctimes do not time the run
      (`release_time.parse`: '+2h', a `timedelta` from its start, or a
      moment).

  Raises:
    ConfigError: an invalid config, one that does not fit its data, or a
      charge the ledger refuses.
    TrialDiverged: the weights became non-finite.
  """
  path = (pathlib.Path(config) if isinstance(config, (str, os.PathLike))
          else None)
  config = _config(config)
  checkpoint_dir = pathlib.Path(checkpoint_dir) if checkpoint_dir else None
  private = config.privacy.claims_privacy
  when = None if release_at is None else release_time.parse(release_at)
  if when and not private:
    raise ConfigError(release_time.FIELD, str(release_at),
                      "unset: this config is not a private run (it publishes"
                      " no guarantee to time)")
  # The key names the run's temp folders: the same when it is resumed.
  key = boundary.run_key("train", checkpoint_dir or path or pathlib.Path.cwd())
  # A private run's files are stamped at its start when it ends: their
  # times would time it.
  out = release.Release(release_at=when)
  if private:
    out.covers(tracking_uri, *([checkpoint_dir] if checkpoint_dir else []))
  with boundary.private_run(key, use_ray=False), _held(
      checkpoint_dir if private else None):
    attempt, card = None, None
    try:
      if private:  # Charged before anything trains, or refused.
        attempt = private_train.charge(
            config, tracking_uri, checkpoint_dir, target_epsilon, new_ledger,
            move_from=pathlib.Path(move_from) if move_from else None)
        out.warn_if_stat_able()
      result = _train(config, checkpoint_dir, attempt.seal if attempt
                      else None, quiet=not progress)
      if private and checkpoint_dir:
        private_train.finish(attempt, tracking_uri, checkpoint_dir)
        private_train.card(config, attempt.entry, tracking_uri,
                           result.metrics["clipping"]).write(checkpoint_dir)
        card = checkpoint_dir / privacy_card.MARKDOWN_FILE
      out.wait()
    finally:
      out.seal()
  return Training(config, result.metrics, result.history,
                  attempt.entry.promotion if attempt else None, card)


def _held(checkpoint_dir: pathlib.Path | None):
  """A private run's checkpoint folder, held while it runs."""
  if checkpoint_dir is None:
    return contextlib.nullcontext()
  return custody.held(checkpoint_dir, "--checkpoint-dir")


def _config(config: Config) -> trial_config.TrialConfig:
  if isinstance(config, trial_config.TrialConfig):
    return config
  if isinstance(config, Mapping):
    return config_io.from_dict(trial_config.TrialConfig,
                               references.with_references(config))
  return config_io.from_dict(trial_config.TrialConfig,
                             config_io.load_yaml(pathlib.Path(config)))


def _train(config: trial_config.TrialConfig,
           checkpoint_dir: pathlib.Path | None,
           seal: checkpoint_file.Seal | None,
           quiet: bool) -> trial.TrialResult:
  """The run, its checkpoints sealed by `seal` if private, with a progress
  bar; a private run's moves at evaluations only and shows no rate or
  clock, which would time its steps."""
  private = config.privacy.claims_privacy
  bar = tqdm.tqdm(
      total=config.privacy.steps, unit="step", disable=quiet,
      **({"bar_format": "{l_bar}{bar}| {n_fmt}/{total_fmt} {postfix}",
          "mininterval": 0} if private else {}))

  def on_report(metrics: dict[str, Any], _: pathlib.Path | None) -> None:
    bar.set_postfix(
        acc=f"{metrics['accuracy']:.3f}",
        eps=f"{metrics['epsilon']:.3g}",
        refresh=False,
    )
    if private:
      bar.update(metrics["step"] - bar.n)

  def on_step(step: int) -> None:
    if not private:
      bar.update(step - bar.n)

  try:
    return trial.run_trial(config, report=on_report,
                           checkpoint_dir=checkpoint_dir, on_step=on_step,
                           seal=seal)
  finally:
    bar.close()
