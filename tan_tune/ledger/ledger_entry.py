"""One entry of the privacy ledger: a private run charged to a dataset.

An entry is an MLflow run of kind `ledger-entry` (`release.py`'s allow-list):
its privacy configuration and spend are params, which MLflow never changes;
the dataset's keyed identity, its ledger id, the charge's name and what
became of it (the run it paid for, or withdrawn) are tags, sealed by a MAC
(`ledger_seal.py`).
"""

import dataclasses
from typing import Any
import uuid

from mlflow.entities import Run

from tan_tune.ledger import ledger_key
from tan_tune.privacy import accountants
from tan_tune.privacy import clipping_bound
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.privacy.trial_count import TrialCount
from tan_tune.privacy import tuning
from tan_tune.privacy.sampling_scheme import POISSON, SamplingScheme

LEDGER_EXPERIMENT = "tan_tune-privacy-ledger"
# An entry's kind of MLflow run, and so its allow-list (`release.py`).
ENTRY_KIND = "ledger-entry"
IDENTITY_TAG = "tan_tune.dataset_identity"
# The dataset's random ledger id: what people see of it.
LEDGER_ID_TAG = "tan_tune.ledger_id"
PROMOTION_TAG = "tan_tune.promotion"
PROMOTED_RUN_TAG = "tan_tune.promoted_run_id"
# A charge withdrawn before its run started (it lost a race).
WITHDRAWN_TAG = "tan_tune.withdrawn"
# The ledger key's id (`ledger_key.key_id`): which key an entry was made under.
KEY_ID_PARAM = "key_id"
Identity = ledger_key.Identity


def promotion_key(search_run_id: str, trial_id: str,
                  attempt: str | None = None) -> str:
  """What names one entry: resuming its attempt finds the same one.

  Args:
    search_run_id: the search's MLflow parent run.
    trial_id: the promoted trial, or "search" for a private search.
    attempt: the promotion's attempt (`new_attempt`); None for a private
      search, whose parent run is already one attempt.
  """
  key = f"{search_run_id}/{trial_id}"
  return f"{key}/{attempt}" if attempt else key


def new_attempt() -> str:
  """A fresh attempt id: a new charge, whatever ran before."""
  return uuid.uuid4().hex[:12]


@dataclasses.dataclass(frozen=True)
class Entry:
  """One private run charged to a dataset.

  Attributes:
    dataset_identity: the dataset's examples (`datasets.examples`), which
      the ledger keys when it charges or looks up the entry; read back from
      the store, their keyed identity.
    dataset_name: its name in the search file, for people.
    promotion: `promotion_key` of the run.
    triplet: (N, B, sigma, S) of the run.
    delta: the delta the run reported.
    epsilon: the run's own eps at `delta` (its scheme's default accountant).
    budget: the target epsilon its search file declared.
    promoted_run_id: its MLflow run, once created.
    scheme: how the run draws batches, and its adjacency.
    trial_count: for a private random search, the distribution of its number
      of trials (`privacy/tuning.py`): `triplet` is each trial's, and
      `epsilon` the whole search's.
    score_noise: for a private random search scored on private validation
      data, the standard deviation of each score's Gaussian noise.
    ledger_id: the dataset's ledger id in the store, once charged.
    config_sha256: of a single run, the digest of the configuration it
      paid for (`trial_config.charged_digest`); a resume with another is
      refused (`custody.py`).
  """

  dataset_identity: Identity
  dataset_name: str
  promotion: str
  triplet: triplet_lib.PrivacyTriplet
  delta: float
  epsilon: float
  budget: float
  promoted_run_id: str | None = None
  scheme: SamplingScheme = POISSON
  trial_count: TrialCount | None = None
  score_noise: float | None = None
  # Shown, not compared: the same charge before and after the store named it.
  ledger_id: str | None = dataclasses.field(default=None, compare=False)
  config_sha256: str | None = None

  @property
  def event(self) -> accountants.Event:
    """What the accountant engine composes for this entry."""
    if self.trial_count:
      return tuning.search_event(self.triplet, self.trial_count,
                                 self.score_noise)
    return accountants.RunEvent(self.triplet, self.scheme)

  @property
  def accountant(self) -> str:
    """Whose eps `epsilon` is: the scheme's default for a run, the
    tighter selection bound for a search."""
    if self.trial_count:
      return accountants.tightest_selection(self.event, self.delta)[1].name
    return accountants.for_composition([self.event]).name

  def as_dict(self) -> dict[str, Any]:
    """What people see of the entry: never its dataset's identity."""
    return {
        "ledger_id": self.ledger_id,
        "dataset_name": self.dataset_name,
        "promotion": self.promotion,
        "promoted_run_id": self.promoted_run_id,
        "dataset_size": self.triplet.dataset_size,
        "batch_size": self.triplet.batch_size,
        "noise_multiplier": self.triplet.noise_multiplier,
        "steps": self.triplet.steps,
        "delta": self.delta,
        "epsilon": self.epsilon,
        "budget": self.budget,
        "accountant": self.accountant,
        "adjacency": self.scheme.adjacency,
        "sampler": str(self.scheme.sampler),
        "truncation_stds": self.scheme.truncation_stds,
        **self.scheme.bound.params(),
        "sampling": self.scheme.describe(self.triplet.batch_size),
        **({"config_sha256": self.config_sha256}
           if self.config_sha256 else {}),
        **({"trial_count_distribution": self.trial_count.distribution,
            "trial_count_mean": self.trial_count.mean,
            "trial_count_shape": self.trial_count.shape,
            "trial_score_noise": self.score_noise}
           if self.trial_count else {}),
    }


def withdrawn(run: Run) -> bool:
  """A charge withdrawn before its run started: it spent nothing."""
  tags = run.data.tags
  return WITHDRAWN_TAG in tags and PROMOTED_RUN_TAG not in tags


def from_run(run: Run) -> Entry:
  """The entry an MLflow run of the ledger records."""
  params, tags = run.data.params, run.data.tags
  return Entry(
      dataset_identity=tags[IDENTITY_TAG],
      ledger_id=tags.get(LEDGER_ID_TAG),
      dataset_name=params["dataset_name"],
      promotion=tags[PROMOTION_TAG],
      triplet=triplet_lib.PrivacyTriplet(
          int(params["dataset_size"]), int(params["batch_size"]),
          float(params["noise_multiplier"]), int(params["steps"])),
      delta=float(params["delta"]),
      epsilon=float(params["epsilon"]),
      budget=float(params["budget"]),
      promoted_run_id=tags.get(PROMOTED_RUN_TAG),
      config_sha256=params.get("config_sha256"),
      # Entries written before samplers were chosen are Poisson add/remove.
      scheme=SamplingScheme(
          params.get("sampler", POISSON.sampler),
          params.get("adjacency", POISSON.adjacency),
          float(params.get("truncation_stds", POISSON.truncation_stds)),
          clipping_bound.from_params(params)),
      trial_count=(TrialCount(
          params["trial_count_distribution"],
          float(params["trial_count_mean"]),
          _optional_float(params["trial_count_shape"]))
                   if "trial_count_distribution" in params else None),
      score_noise=_optional_float(params.get("trial_score_noise")),
  )


def _optional_float(text: str | None) -> float | None:
  """MLflow keeps params as strings: None is 'None'."""
  return None if text in (None, "None") else float(text)
