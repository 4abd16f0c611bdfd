"""The privacy ledger: what each dataset has spent, whichever search spent it.

A privacy budget belongs to the people behind a dataset, not to a trial or a
search: promoting two trials of one search, or trials of two searches on the
same data, spends it twice. Every private run is therefore recorded against
the dataset's identity before it trains, and a new run is allowed only if
the composition of everything recorded for that dataset with the new run
stays within budget (`composition.py`), each run composed with its sampling
scheme (Poisson at q_r = B_r / N_r and
add/remove-one adjacency unless its search file chose otherwise; runs of
one dataset share an adjacency; truncated-Poisson runs compose as PLDs,
`accounting.composed_epsilon`). A private random search (`tuning_privacy:
private_random_search`) is one entry, its RDP Papernot & Steinke's bound
for all its trials; with one among a dataset's entries, all compose under
the `rdp-repeat-and-select` accountant (Poisson add/remove-one runs only). The
budget is the smallest target epsilon any run on the dataset declared: a
later search file cannot loosen it. It lives beside the search driver, which
charges private searches, and below `promote`, which charges promotions.

A dataset's identity, in the entries' tags, is its examples keyed with the
store's secret key (`ledger_key.py`). People see the data's name and its
ledger id, a random id its first charge draws and later ones copy.

What counts:

- An entry counts from the moment it is reserved, at its planned steps,
  whether the run then finishes, fails or is still running: a failed run may
  have released something.
- It counts whatever becomes of the MLflow runs: a deleted entry, or a
  deleted promoted run, is still read (`ViewType.ALL`).
- Each attempt at a run is its own entry (`promotion_key` with an attempt
  id): a killed run resumed from its state finds its own entry, so nothing
  is counted twice, and any other try is a new charge composed with the
  earlier ones.
- An entry names one run, once (`link`): it is never moved to another, and
  its run resumes in one place only (`custody.py`).
- Only a charge withdrawn before anything trained (`release`: it lost a
  race) is skipped; it is tagged withdrawn, never deleted.

Entries are MLflow runs in the experiment `LEDGER_EXPERIMENT` of the store
the runs live in, so a shared tracking server shares the ledger. Two
promotions racing on one dataset both reserve, then both re-check with each
other's entry counted: at worst both refuse, never both overspend. Whoever
can write to the store's database itself (or set the ledger's tags by hand)
can still edit it: the ledger guards against mistakes and clean-ups, not
against its administrators.
"""

import dataclasses
import secrets
from typing import Any
import uuid

from mlflow import MlflowClient
from mlflow.entities import LifecycleStage
from mlflow.entities import Run
from mlflow.entities import ViewType

from tan_tune.privacy import accountants
from tan_tune.privacy import clipping_bound
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.privacy import tuning
from tan_tune.privacy.sampling_scheme import POISSON, SamplingScheme
from tan_tune.private_runs import ledger_key
from tan_tune.private_runs import mlflow_store
from tan_tune.private_runs import release

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
# Random bytes of a ledger id.
_LEDGER_ID_BYTES = 4
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
    ledger_id: the dataset's random ledger id in the store, once charged.
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
  trial_count: tuning.TrialCount | None = None
  # Shown, not compared: the same charge before and after the store named it.
  ledger_id: str | None = dataclasses.field(default=None, compare=False)
  config_sha256: str | None = None

  @property
  def event(self) -> accountants.Event:
    """What the accountant engine composes for this entry."""
    if self.trial_count:
      return tuning.search_event(self.triplet, self.trial_count)
    return accountants.RunEvent(self.triplet, self.scheme)

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
        "accountant": accountants.for_composition([self.event]).name,
        "adjacency": self.scheme.adjacency,
        "sampler": self.scheme.sampler.value,
        "truncation_stds": self.scheme.truncation_stds,
        **self.scheme.bound.params(),
        "sampling": self.scheme.describe(self.triplet.batch_size),
        **({"config_sha256": self.config_sha256}
           if self.config_sha256 else {}),
        **({"trial_count_distribution": self.trial_count.distribution,
            "trial_count_mean": self.trial_count.mean,
            "trial_count_shape": self.trial_count.shape}
           if self.trial_count else {}),
    }

class Ledger:
  """The ledger of one MLflow store."""

  def __init__(self, tracking_uri: str):
    self.tracking_uri = mlflow_store.absolute_uri(tracking_uri)
    self._client: MlflowClient | None = None
    self._experiment_id: str | None = None
    self._key = ledger_key.StoreKey(self.tracking_uri,
                                    lambda: bool(self.entries()))

  @property
  def client(self) -> MlflowClient:
    # On first use: a client opens (and so creates) a sqlite store.
    if self._client is None:
      self._client = MlflowClient(self.tracking_uri)
    return self._client

  @property
  def experiment_id(self) -> str:
    if self._experiment_id is None:
      self._experiment_id = mlflow_store.experiment_id(
          self.client, self.tracking_uri, LEDGER_EXPERIMENT)
      experiment = self.client.get_experiment(self._experiment_id)
      if experiment.lifecycle_stage == LifecycleStage.DELETED:
        # Its entries still count; new ones need it active.
        self.client.restore_experiment(self._experiment_id)
    return self._experiment_id

  def identity(self, dataset: Identity) -> str:
    """A dataset's keyed identity in this store (`ledger_key.StoreKey`)."""
    return self._key.identity(dataset)

  def entries(self, dataset: Identity | None = None) -> list[Entry]:
    """Every entry, or a dataset's, oldest first; none before the first run.

    Deleted entries count like the others; withdrawn ones (`release`) that
    never named a run do not.
    """
    # Reading creates nothing: no database file, no experiment.
    if not mlflow_store.store_exists(self.tracking_uri):
      return []
    experiment = self.client.get_experiment_by_name(LEDGER_EXPERIMENT)
    if experiment is None:
      return []
    where = (f"tags.`{IDENTITY_TAG}` = '{self.identity(dataset)}'"
             if dataset is not None else "")
    runs = self.client.search_runs([experiment.experiment_id],
                                   filter_string=where,
                                   run_view_type=ViewType.ALL,
                                   order_by=["attributes.start_time ASC"],
                                   max_results=50000)
    return [_entry(run) for run in runs if not _withdrawn(run)]

  def reserve(self, entry: Entry) -> bool:
    """Charges `entry` to its dataset, once; False if it already was.

    The entry takes its dataset's ledger id, or draws it as the dataset's
    first charge in the store.
    """
    earlier = self.entries(entry.dataset_identity)
    if any(e.promotion == entry.promotion for e in earlier):
      return False
    ledger_id = next((e.ledger_id for e in earlier if e.ledger_id),
                     None) or secrets.token_hex(_LEDGER_ID_BYTES)
    # The store first: then the entry starts and ends at one instant after.
    experiment_id = self.experiment_id
    out = release.Release()
    run_id = out.create_run(
        self.client, experiment_id, ENTRY_KIND,
        f"{entry.dataset_name}-{entry.promotion.replace('/', '-')}",
        {IDENTITY_TAG: self.identity(entry.dataset_identity),
         LEDGER_ID_TAG: ledger_id, PROMOTION_TAG: entry.promotion})
    out.log_params(self.client, run_id, ENTRY_KIND, {
        k: v for k, v in entry.as_dict().items()
        if k not in ("ledger_id", "promotion", "promoted_run_id")})
    out.log_metrics(self.client, run_id, ENTRY_KIND,
                    {"epsilon": entry.epsilon})
    out.end_run(self.client, run_id)
    return True

  def link(self, promotion: str, promoted_run_id: str) -> bool:
    """Names the MLflow run a reserved entry paid for, once and for all.

    Returns:
      True once the entry names `promoted_run_id`; False, changing nothing,
      when there is no such entry or it already names another run.
    """
    runs = self.runs_of(promotion)
    named = {run.data.tags.get(PROMOTED_RUN_TAG) for run in runs} - {None}
    if not runs or named - {promoted_run_id}:
      return False
    if not named:
      for run in runs:
        self._tag(run, PROMOTED_RUN_TAG, promoted_run_id)
    return True

  def derive_key(self, purpose: str) -> bytes:
    """A key of `purpose`'s own, derived from the store's secret key
    (`ledger_key.StoreKey.derive`)."""
    return self._key.derive(purpose)

  def release(self, promotion: str) -> None:
    """Withdraws an entry whose run never started (it lost a race): tagged,
    not deleted, since deleted entries count. A linked entry stays counted."""
    for run in self.runs_of(promotion):
      self._tag(run, WITHDRAWN_TAG, "true")

  def runs_of(self, promotion: str) -> list[Run]:
    """The entry's MLflow runs, deleted or not, withdrawn ones left out."""
    runs = self.client.search_runs(
        [self.experiment_id],
        filter_string=f"tags.`{PROMOTION_TAG}` = '{promotion}'",
        run_view_type=ViewType.ALL)
    return [run for run in runs if not _withdrawn(run)]

  def _tag(self, run: Run, key: str, value: str) -> None:
    self.restore(run)
    self.client.set_tag(run.info.run_id, key, value)

  def restore(self, run: Run) -> None:
    """Brings a deleted entry's run back (its charge counts either way)."""
    # MLflow writes to active runs only; a deleted entry comes back for it.
    if run.info.lifecycle_stage == LifecycleStage.DELETED:
      self.client.restore_run(run.info.run_id)


def _withdrawn(run: Run) -> bool:
  """A charge withdrawn before its run started: it spent nothing."""
  tags = run.data.tags
  return WITHDRAWN_TAG in tags and PROMOTED_RUN_TAG not in tags


def _entry(run) -> Entry:
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
      trial_count=(tuning.TrialCount(
          params["trial_count_distribution"],
          float(params["trial_count_mean"]),
          _optional_float(params["trial_count_shape"]))
                   if "trial_count_distribution" in params else None),
  )


def _optional_float(text: str | None) -> float | None:
  """MLflow keeps params as strings: None is 'None'."""
  return None if text in (None, "None") else float(text)
