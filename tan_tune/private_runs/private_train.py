"""`tan-tune train` of a private config: charged to the ledger like any run.

A private config (DP-SGD, not a simulation) prints an epsilon as a
guarantee, so it spends its dataset's budget like a promotion does: it is
charged to the privacy ledger of the tracking store before it trains, and
refused when the dataset's composed spend would pass its budget. Its
checkpoints hold the secret sampling, noise and dropout generator states
while the run lives; once it has finished, they are removed from the last
checkpoint, which keeps the weights (a finished run resumed only reports).

A run with `--checkpoint-dir` is one attempt, whatever the number of times
it is resumed: its checkpoints carry the key of the ledger entry that paid for
it, and the entry names the run's privacy configuration (dataset, N, B,
sigma, S, delta, sampler, adjacency, clipping bound). A checkpoint is resumed
only when the ledger holds its entry with the same configuration; a folder
without a checkpoint is a new attempt, charged anew; a checkpoint no entry of
this configuration paid for is refused. The finished run's checkpoint
leaves with its privacy card beside it (`card`).
"""

import pathlib

from tan_tune import config_io
from tan_tune.errors import ConfigError
from tan_tune.privacy import accounting
from tan_tune.privacy import report as privacy_report
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.private_runs import charge as charge_protocol
from tan_tune.private_runs import ledger as ledger_lib
from tan_tune.private_runs import privacy_card
from tan_tune.private_runs import served_model
from tan_tune.training import checkpoint_file
from tan_tune.training import datasets
from tan_tune.training import plugins
from tan_tune.training import preflight
from tan_tune.training import run_state
from tan_tune.training import trial_config

# How a `train` config's hyper-parameters were chosen, for its card.
TUNING = "given"
TUNING_GUARANTEE = ("the config's hyper-parameters, chosen outside tan_tune:"
                    " if they were chosen on this private data, that choice"
                    " is not accounted")


def charge(config: trial_config.TrialConfig, tracking_uri: str,
           checkpoint_dir: pathlib.Path | None, target_epsilon: float | None,
           new_ledger: bool, kind: str = "train",
           training_size: int | None = None) -> ledger_lib.Entry:
  """Charges the run to its dataset's ledger, once per attempt: the entry
  whose checkpoint `checkpoint_dir` holds, or a new one.

  Args:
    kind: names the entry ('train', 'audit').
    training_size: N of the run's triplet when it trains on more than the
      dataset's training split (an audit's canaries); default N.

  Returns:
    The entry; its `promotion` is the charge the run's checkpoints carry.

  Raises:
    ConfigError: the store has no ledger for the dataset and `new_ledger` is
      unset; no budget is known; the budget has no room for the run;
      `checkpoint_dir` holds a checkpoint no entry of this configuration in
      this store paid for.
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
    return _paid_for(checkpoint_dir, entry, earlier)
  charge_protocol.require_known_dataset(ledger, entry.dataset_identity,
                                        entry.dataset_name, new_ledger)
  budgets = [e.budget for e in earlier] + (
      [target_epsilon] if target_epsilon else [])
  if not budgets:
    raise ConfigError(
        "--target-epsilon", None,
        f"the privacy budget of {entry.dataset_name}, for its first private"
        " run in this store (or promote a searched config with `tan-tune"
        " promote`, whose search file names it)")
  entry = _entry(config, data, size, key, budget=min(budgets))
  charge_protocol.charge(ledger, entry, new_ledger, "--target-epsilon")
  return entry


def _paid_for(checkpoint_dir: pathlib.Path, entry: ledger_lib.Entry,
              earlier: list[ledger_lib.Entry]) -> ledger_lib.Entry:
  """The entry, among `earlier` (the dataset's), that wrote the checkpoint
  in `checkpoint_dir`, when it paid for `entry`'s privacy configuration.

  Raises:
    ConfigError: no entry of the dataset's ledger wrote the checkpoint with
      the same configuration.
  """
  path = checkpoint_dir / checkpoint_file.CHECKPOINT_FILE
  written_by = checkpoint_file.charge_of(path)
  for charged in earlier:
    if charged.promotion == written_by and _same_privacy(charged, entry):
      return charged
  raise ConfigError(
      "--checkpoint-dir", str(checkpoint_dir),
      f"a folder with no checkpoint (a new run, charged), or one whose"
      f" checkpoint this configuration was charged for in this store; the"
      f" ledger has no entry {written_by or '(none named)'} for"
      f" {entry.dataset_name} with these N, B, sigma, S, delta and sampler."
      " Restore the config, or use a new folder")


def _same_privacy(charged: ledger_lib.Entry, entry: ledger_lib.Entry) -> bool:
  """Whether `charged`, an entry of `entry`'s dataset, paid for `entry`'s
  run: the triplet, delta, sampler, adjacency and clipping bound alike."""
  return (charged.triplet, charged.delta, charged.scheme) == (
      entry.triplet, entry.delta, entry.scheme)


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
      "ledger": ledger_lib.compose(
          ledger.entries(entry.dataset_identity), entry).as_dict(),
      "served_model": {"inputs": served_model.Inputs.of(data).as_dict()},
      "model_weights_sha256": (plugins.file_digest("model.weights", weights)
                               if weights else None),
  }
  tags = {**privacy_card.code_tags(), "tan_tune.clipping": clipping}
  return privacy_card.build_train(
      privacy_card.Published.stated("train", params, tags))


def forget_generators(checkpoint_dir: pathlib.Path) -> None:
  """The finished run's checkpoint without its secret generator states."""
  path = checkpoint_dir / checkpoint_file.CHECKPOINT_FILE
  if path.exists():
    checkpoint_file.strip_generator_states(path)


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
      budget=budget, scheme=privacy.scheme)
