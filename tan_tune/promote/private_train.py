"""`tan-tune train` of a private config: charged to the ledger like any run.

A private config (DP-SGD, not a simulation) prints an epsilon as a
guarantee, so it spends its dataset's budget like a promotion does: it is
charged to the privacy ledger of the tracking store before it trains, and
refused when the dataset's composed spend would pass its budget. Its
checkpoints hold the secret sampling, noise and dropout generator states
while the run lives; once it has finished, they are removed from the last
checkpoint, which keeps the weights (a finished run resumed only reports).

A run with `--checkpoint-dir` is one attempt, whatever the number of times
it is resumed, held in custody (`custody.py`): its checkpoints are sealed
under a key the ledger derives for its entry, the entry records the
configuration it paid for and the one folder it runs in, and once it has
finished it never trains again. A folder without a checkpoint is a new
attempt, charged anew; a checkpoint is resumed only in its place, by the
configuration it was charged for, with its seal intact; anything else is
refused before it trains. The finished run's checkpoint leaves with its
privacy card beside it (`card`).
"""

import dataclasses
import pathlib

from tan_tune import config_io
from tan_tune.errors import ConfigError
from tan_tune.ledger import charge as charge_protocol
from tan_tune.ledger import composition as composition_lib
from tan_tune.ledger import custody
from tan_tune.ledger import ledger as ledger_lib
from tan_tune.privacy import accounting
from tan_tune.privacy import report as privacy_report
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.registry import privacy_card
from tan_tune.registry import served_model
from tan_tune.training import checkpoint_file
from tan_tune.training import datasets
from tan_tune.training import plugins
from tan_tune.training import preflight
from tan_tune.training import run_state
from tan_tune.training import trial_config

# How a `train` config's hyper-parameters were chosen, for its card.
TUNING = "given"
_FOLDER = "--checkpoint-dir"
TUNING_GUARANTEE = ("the config's hyper-parameters, chosen outside tan_tune:"
                    " if they were chosen on this private data, that choice"
                    " is not accounted")


@dataclasses.dataclass(frozen=True)
class Attempt:
  """A private run paid for: its ledger entry and its checkpoints' seal."""

  entry: ledger_lib.Entry
  seal: checkpoint_file.Seal


def charge(config: trial_config.TrialConfig, tracking_uri: str,
           checkpoint_dir: pathlib.Path | None, target_epsilon: float | None,
           new_ledger: bool, kind: str = "train",
           training_size: int | None = None,
           move_from: pathlib.Path | None = None) -> Attempt:
  """Charges the run to its dataset's ledger, once per attempt: the
  attempt whose sealed checkpoint `checkpoint_dir` holds, or a new one;
  then takes its custody in `checkpoint_dir` (`custody.take`, which the
  caller holds: `custody.held`).

  Args:
    kind: names the entry ('train', 'audit').
    training_size: N of the run's triplet when it trains on more than the
      dataset's training split (an audit's canaries); default N.
    move_from: the folder the attempt ran in before `checkpoint_dir`.

  Raises:
    ConfigError: the store has no ledger for the dataset and `new_ledger` is
      unset; no budget is known; the budget has no room for the run;
      `checkpoint_dir` holds a checkpoint this store did not seal, of a run
      that finished or runs elsewhere, or charged for another configuration.
  """
  data = datasets.load_dataset(config.dataset)
  run_state.check_fits(config, data.num_train)
  preflight.check(config, data)
  ledger = ledger_lib.Ledger(tracking_uri)
  key = f"{kind}/{ledger_lib.new_attempt()}"
  size = training_size or data.num_train
  entry = _entry(config, data, size, key, budget=1.0)
  earlier = ledger.entries(entry.dataset_identity)
  checkpoint = (checkpoint_dir
                and checkpoint_dir / checkpoint_file.CHECKPOINT_FILE)
  if checkpoint and checkpoint.exists():
    entry = _paid_for(ledger, checkpoint_dir, config, entry, earlier)
  else:
    charge_protocol.require_known_dataset(ledger, entry.dataset_identity,
                                          entry.dataset_name, new_ledger)
    budgets = [e.budget for e in earlier] + (
        [target_epsilon] if target_epsilon else [])
    if not budgets:
      raise ConfigError(
          "--target-epsilon", None,
          f"the privacy budget of {entry.dataset_name}, for its first"
          " private run in this store (or promote a searched config with"
          " `tan-tune promote`, whose search file names it)")
    entry = _entry(config, data, size, key, budget=min(budgets))
    charge_protocol.charge(ledger, entry, new_ledger, "--target-epsilon")
  if checkpoint_dir:
    custody.take(ledger, entry.promotion, checkpoint_dir, _FOLDER, move_from)
  return Attempt(entry, custody.seal(ledger, entry.promotion, config))


def finish(attempt: Attempt, tracking_uri: str,
           checkpoint_dir: pathlib.Path) -> None:
  """Records the attempt finished in `checkpoint_dir`, then strips its
  checkpoint's generator states.

  Raises:
    ConfigError: the attempt finished in another place first.
  """
  custody.finish(ledger_lib.Ledger(tracking_uri), attempt.entry.promotion,
                 checkpoint_dir, _FOLDER)
  path = checkpoint_dir / checkpoint_file.CHECKPOINT_FILE
  if path.exists():
    checkpoint_file.strip_generator_states(path, attempt.seal)


def _paid_for(ledger: ledger_lib.Ledger, checkpoint_dir: pathlib.Path,
              config: trial_config.TrialConfig, entry: ledger_lib.Entry,
              earlier: list[ledger_lib.Entry]) -> ledger_lib.Entry:
  """The entry, among `earlier` (the dataset's), whose run sealed the
  checkpoint in `checkpoint_dir`, when it paid for `config`, has not
  finished (or the checkpoint is its last) and the seal holds.

  Raises:
    ConfigError: as `charge`.
  """
  path = checkpoint_dir / checkpoint_file.CHECKPOINT_FILE
  written_by = (checkpoint_file.header(path) or {}).get("charge")
  charged = next((e for e in earlier if e.promotion == written_by), None)
  if charged is None or (charged.triplet, charged.delta, charged.scheme) != (
      entry.triplet, entry.delta, entry.scheme):
    raise ConfigError(
        _FOLDER, str(checkpoint_dir),
        f"a folder with no checkpoint (a new run, charged), or one whose"
        f" checkpoint this configuration was charged for in this store; the"
        f" ledger has no entry {written_by or '(none named)'} for"
        f" {entry.dataset_name} with these N, B, sigma, S, delta and sampler."
        " Restore the config, or use a new folder")
  seal = custody.seal(ledger, charged.promotion, config)
  try:
    header = checkpoint_file.verified_header(path, seal)
  except checkpoint_file.CheckpointRefused as error:
    raise ConfigError(_FOLDER, str(checkpoint_dir),
                      f"a checkpoint sealed by this store's ledger: {error}"
                      ) from None
  edits = trial_config.edits(header["config"], config)
  if edits or charged.config_sha256 != trial_config.charged_digest(config):
    raise ConfigError(
        _FOLDER, str(checkpoint_dir),
        f"a resume of the configuration its checkpoint was charged for;"
        f" edited: {'; '.join(edits) or 'the configuration'}. An edit is"
        " never ignored on resume: restore the config, or use a new folder"
        " (a new, charged run)")
  if header["step"] < config.privacy.steps:
    custody.require_unfinished(ledger, charged.promotion, checkpoint_dir,
                               _FOLDER)
  return charged


def card(config: trial_config.TrialConfig, entry: ledger_lib.Entry,
         tracking_uri: str, clipping: str) -> privacy_card.PrivacyCard:
  """The privacy card of the finished run `entry` paid for, whose engine
  was `clipping`: eps at delta per accountant, the sampler and adjacency,
  the dataset's ledger with it, what the checkpoint releases and how the
  hyper-parameters were chosen; stated through the 'train' allow-list."""
  data = datasets.load_dataset(config.dataset)
  ledger = ledger_lib.Ledger(tracking_uri)
  weights = config.model.weights
  params = {
      "reference_run": config_io.to_dict(config),
      "privacy": privacy_report.privacy_report(
          entry.triplet, entry.delta, scheme=entry.scheme).as_dict(),
      "tuning_privacy": TUNING, "tuning_guarantee": TUNING_GUARANTEE,
      "ledger": composition_lib.compose(
          ledger.entries(entry.dataset_identity), entry).as_dict(),
      "served_model": {"inputs": served_model.Inputs.of(data).as_dict()},
      "model_weights_sha256": (plugins.file_digest("model.weights", weights)
                               if weights else None),
  }
  tags = {**privacy_card.code_tags(), "tan_tune.clipping": clipping}
  return privacy_card.build_train(
      privacy_card.Published.stated("train", params, tags))


def _entry(config: trial_config.TrialConfig, data: datasets.Dataset,
           size: int, key: str, budget: float) -> ledger_lib.Entry:
  privacy = config.privacy
  triplet = triplet_lib.PrivacyTriplet(
      size, privacy.batch_size, privacy.noise_multiplier, privacy.steps)
  delta = accounting.delta_or_default(privacy.delta, data.num_train)
  return ledger_lib.Entry(
      dataset_identity=datasets.examples(data),
      dataset_name=config.dataset.title,
      promotion=key,
      triplet=triplet, delta=delta,
      epsilon=accounting.epsilon(triplet, delta,
                                 scheme=privacy.scheme).epsilon,
      budget=budget, scheme=privacy.scheme,
      config_sha256=trial_config.charged_digest(config))
