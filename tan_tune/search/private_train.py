"""`tan-tune train` of a private config: charged to the ledger like any run.

A private config (DP-SGD, not a simulation) prints an epsilon as a
guarantee, so it spends its dataset's budget like a promotion does: it is
charged to the privacy ledger of the tracking store before it trains, and
refused when the dataset's composed spend would pass its budget. Its
checkpoints hold the secret sampling, noise and dropout generator states
while the run lives; once it has finished, they are removed from the last
checkpoint, which keeps the weights (a finished run resumed only reports).

A run with `--checkpoint-dir` is one attempt, whatever the number of times
it is resumed: the attempt's ledger key is kept beside its checkpoints.
"""

import json
import os
import pathlib
import uuid

from tan_tune.errors import ConfigError
from tan_tune.privacy import accounting
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.search import boundary
from tan_tune.search import ledger as ledger_lib
from tan_tune.training import datasets
from tan_tune.training import run_state
from tan_tune.training import trial_config

ATTEMPT_FILE = "ledger_entry.json"


def charge(config: trial_config.TrialConfig, tracking_uri: str,
           checkpoint_dir: pathlib.Path | None, target_epsilon: float | None,
           new_ledger: bool, kind: str = "train",
           training_size: int | None = None) -> ledger_lib.Entry:
  """Charges the run to its dataset's ledger, once per attempt.

  Args:
    kind: names the entry ('train', 'audit').
    training_size: N of the run's triplet when it trains on more than the
      dataset's training split (an audit's canaries); default N.

  Raises:
    ConfigError: the store has no ledger for the dataset and `new_ledger` is
      unset; no budget is known; the budget has no room for the run.
  """
  data = datasets.load_dataset(config.dataset)
  run_state.check_fits(config, data.num_train)
  ledger = ledger_lib.Ledger(tracking_uri)
  attempt = _attempt(checkpoint_dir)
  key, size = f"{kind}/{attempt}", training_size or data.num_train
  entry = _entry(config, data, size, key, budget=1.0)
  earlier = ledger.entries(entry.dataset_identity)
  if any(e.promotion == entry.promotion for e in earlier):
    return entry  # A resumed attempt, already charged.
  boundary.require_known_dataset(ledger, entry.dataset_identity,
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
  boundary.charge(ledger, entry, new_ledger, "--target-epsilon")
  if checkpoint_dir:
    _keep_attempt(checkpoint_dir, attempt)
  return entry


def forget_generators(checkpoint_dir: pathlib.Path) -> None:
  """The finished run's checkpoint without its secret generator states."""
  path = checkpoint_dir / run_state.CHECKPOINT_FILE
  if path.exists():
    run_state.strip_generator_states(path)


def _entry(config: trial_config.TrialConfig, data: datasets.Dataset,
           size: int, key: str, budget: float) -> ledger_lib.Entry:
  privacy = config.privacy
  triplet = triplet_lib.PrivacyTriplet(
      size, privacy.batch_size, privacy.noise_multiplier, privacy.steps)
  delta = privacy.delta or accounting.default_delta(data.num_train)
  return ledger_lib.Entry(
      dataset_identity=datasets.examples(data),
      dataset_name=config.dataset.title,
      promotion=key,
      triplet=triplet, delta=delta,
      epsilon=accounting.epsilon(triplet, delta,
                                 scheme=privacy.scheme).epsilon,
      budget=budget, scheme=privacy.scheme)


def _attempt(checkpoint_dir: pathlib.Path | None) -> str:
  """The attempt a checkpoint folder belongs to, or a new one."""
  path = checkpoint_dir / ATTEMPT_FILE if checkpoint_dir else None
  if path and path.exists():
    return json.loads(path.read_text())["attempt"]
  return uuid.uuid4().hex[:12]


def _keep_attempt(checkpoint_dir: pathlib.Path, attempt: str) -> None:
  checkpoint_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
  descriptor = os.open(checkpoint_dir / ATTEMPT_FILE,
                       os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
  with os.fdopen(descriptor, "w") as file:
    json.dump({"attempt": attempt}, file)
