"""A ledger entry's seal: a MAC under the ledger key over all that counts.

Anyone who may write to a team's tracking server may change a run's tags:
marking an entry withdrawn, removing the run it paid for or moving it to
another dataset would give its budget back. Each entry therefore carries

    mac = HMAC-SHA256(k_mac, run id || params || covered tags),

k_mac = HMAC-SHA256(ledger key, "ledger entry mac"), the params being its
privacy configuration and spend (what it was charged, under which key) and
the covered tags its dataset, ledger id, charge, promoted run and
withdrawal. Whoever holds the key re-seals an entry when it names its run or
is withdrawn, in the same write (one MLflow `log_batch`); a reader who finds
a seal that does not match refuses to compose the dataset (`tampered`).
Params added after the charge (where the run is kept, its place in the
ledger's order) are left out: MLflow never changes a param once written.
"""

import hashlib
import hmac
import json

from mlflow.entities import Run

from tan_tune.errors import ConfigError
from tan_tune.ledger import ledger_entry

MAC_TAG = "tan_tune.mac"
MAC_PURPOSE = "ledger entry mac"
COVERED_TAGS = (ledger_entry.IDENTITY_TAG, ledger_entry.LEDGER_ID_TAG,
                ledger_entry.PROMOTION_TAG, ledger_entry.PROMOTED_RUN_TAG,
                ledger_entry.WITHDRAWN_TAG)
# Params written after the charge, never changed once written.
_LATER_PARAMS = ("custody.", "sequence")


def tampered(run: Run) -> ConfigError:
  """The error of an entry whose seal does not match it."""
  tags = run.data.tags
  return ConfigError(
      "ledger entry", run.info.run_id,
      f"an entry as its charge sealed it: the charge"
      f" {tags.get(ledger_entry.PROMOTION_TAG)!r} of"
      f" {run.data.params.get('dataset_name')!r} was changed without the"
      " ledger key (its tags no longer match its MAC), so its dataset's"
      " spend cannot be composed. Ask whoever administers the tracking"
      " server who changed it; nothing is charged until it is restored")


def mac(key: bytes, run_id: str, params: dict[str, str],
        tags: dict[str, str]) -> str:
  """The seal of an entry whose run, params and tags are these."""
  message = json.dumps({
      "run": run_id,
      "params": {name: value for name, value in params.items()
                 if not name.startswith(_LATER_PARAMS)},
      "tags": {name: tags.get(name) for name in COVERED_TAGS},
  }, sort_keys=True)
  return hmac.new(key, message.encode(), hashlib.sha256).hexdigest()


def sealed(key: bytes, run: Run, tags: dict[str, str]) -> dict[str, str]:
  """`tags` with the entry's new seal: what to write in one batch."""
  new_tags = {**run.data.tags, **tags}
  return {**tags, MAC_TAG: mac(key, run.info.run_id, run.data.params,
                               new_tags)}


def verify(key: bytes, run: Run) -> None:
  """Raises `tampered(run)` unless `run`'s seal matches it."""
  expected = mac(key, run.info.run_id, run.data.params, run.data.tags)
  if not hmac.compare_digest(run.data.tags.get(MAC_TAG, ""), expected):
    raise tampered(run)
