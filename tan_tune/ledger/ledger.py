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
ledger id, HMAC(key, "ledger id:" || identity) cut to 8 hex digits: the same
for every charge under the key, whoever makes it first.

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

Entries (`ledger_entry.py`) are MLflow runs, written to the experiment
`LEDGER_EXPERIMENT` of the store the runs live in, so a shared tracking
server shares the ledger; they are found by their params in every
experiment, so renaming, deleting or restoring an experiment changes
nothing. A store has one ledger key: each entry records the key id it was
charged under, and a charge under another key than the store's first is
refused. Each entry is sealed by a MAC under the key (`ledger_seal.py`),
verified whenever the ledger is read: an edited entry stops every charge,
naming it. Runs charging at once are ordered by the store
(`ledger_order.py`), and an entry counts iff it fits with the entries
counted before it: of several runs at once, exactly those that fit run.
Whoever can write to the store's database itself can still delete entries
for good: the ledger guards against its users, not its administrators.
"""

import pathlib

from mlflow import MlflowClient
from mlflow.entities import LifecycleStage
from mlflow.entities import Run
from mlflow.entities import ViewType

from tan_tune import config_io
from tan_tune import mlflow_store
from tan_tune.errors import ConfigError
from tan_tune.ledger import composition as composition_lib
from tan_tune.ledger import ledger_entry
from tan_tune.ledger import ledger_key
from tan_tune.ledger import ledger_order
from tan_tune.ledger import ledger_seal
from tan_tune.release import release

# What callers name through the ledger.
Entry = ledger_entry.Entry
Identity = ledger_entry.Identity
promotion_key = ledger_entry.promotion_key
new_attempt = ledger_entry.new_attempt
LEDGER_EXPERIMENT = ledger_entry.LEDGER_EXPERIMENT
ENTRY_KIND = ledger_entry.ENTRY_KIND
IDENTITY_TAG = ledger_entry.IDENTITY_TAG
PROMOTION_TAG = ledger_entry.PROMOTION_TAG
PROMOTED_RUN_TAG = ledger_entry.PROMOTED_RUN_TAG
WITHDRAWN_TAG = ledger_entry.WITHDRAWN_TAG
_KEY_ID = ledger_entry.KEY_ID_PARAM
_LEDGER_ID_HEX = 8
# Entries from before keys had ids: placed first, by start time.
_UNORDERED = -1
# How many experiment ids one search of runs names.
_EXPERIMENTS_PER_SEARCH = 100


class Ledger:
  """The ledger of one MLflow store."""

  def __init__(self, tracking_uri: str):
    self.tracking_uri = mlflow_store.absolute_uri(tracking_uri)
    self._client: MlflowClient | None = None
    self._experiment_id: str | None = None
    self._key = ledger_key.StoreKey(self.tracking_uri,
                                    lambda: bool(self._entry_runs()))

  @property
  def client(self) -> MlflowClient:
    # On first use: a client opens (and so creates) a sqlite store.
    if self._client is None:
      self._client = MlflowClient(self.tracking_uri)
    return self._client

  @property
  def experiment_id(self) -> str:
    """Where new entries go (found by name: old ones are found anywhere)."""
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

  def export_key(self, path: pathlib.Path) -> None:
    """Writes the store's key to a new owner-only file (`ledger_key`)."""
    self._key.export(path)

  def entries(self, dataset: Identity | None = None) -> list[Entry]:
    """Every entry that counts, or a dataset's, in the ledger's order; none
    before the first run.

    Deleted entries count like the others; withdrawn ones (`release`) that
    never named a run, and those the order refused, do not.

    Raises:
      ConfigError: an entry was edited without the key (`ledger_seal`); the
        store's ledger is under another key than this user's.
    """
    identity = None if dataset is None else self.identity(dataset)
    return [entry for entry, _, counts in self._ordered()
            if counts and identity in (None, entry.dataset_identity)]

  def entries_before(self, entry: Entry) -> list[Entry]:
    """The counted entries of `entry`'s dataset placed before its charge
    (`reserve`): what its run is composed with.

    Raises:
      ConfigError: as `entries`.
    """
    identity = self.identity(entry.dataset_identity)
    earlier = []
    for other, _, counts in self._ordered():
      if other.promotion == entry.promotion:
        return earlier
      if counts and other.dataset_identity == identity:
        earlier.append(other)
    raise ValueError(f"{entry.promotion} is not placed in the ledger")

  def reserve(self, entry: Entry) -> bool:
    """Charges `entry` to its dataset, once, and takes its place in the
    ledger's order; False if it was charged already (then it keeps its
    place, taking one if a crash left it without).

    The entry carries the dataset's ledger id, the key id and its seal.
    """
    runs = self.runs_of(entry.promotion)
    reserved = not runs
    if reserved:
      runs = [self.client.get_run(self._create(entry))]
    for run in runs:
      if ledger_order.SEQUENCE_PARAM in run.data.params:
        continue
      place = ledger_order.take_place(self.client, run)
      self.restore(run)
      release.Release().log_param_once(
          self.client, run.info.run_id, ENTRY_KIND,
          ledger_order.SEQUENCE_PARAM, place.text())
    return reserved

  def _create(self, entry: Entry) -> str:
    """A new entry's run: tags, its seal, then its params (a run without
    them is a charge under way, which no reader counts)."""
    identity = self.identity(entry.dataset_identity)
    ledger_id = self._key.derive(f"ledger id:{identity}").hex()[:_LEDGER_ID_HEX]
    tags = {IDENTITY_TAG: identity, ledger_entry.LEDGER_ID_TAG: ledger_id,
            PROMOTION_TAG: entry.promotion}
    params = {key: str(value) for key, value in config_io.flatten({
        **{k: v for k, v in entry.as_dict().items()
           if k not in ("ledger_id", "promotion", "promoted_run_id")},
        _KEY_ID: self._key.key_id()}).items()}
    experiment_id = self.experiment_id  # The store first: see t_0.
    out = release.Release()
    run_id = out.create_run(
        self.client, experiment_id, ENTRY_KIND,
        f"{entry.dataset_name}-{entry.promotion.replace('/', '-')}", tags)
    out.set_tags(self.client, run_id, ENTRY_KIND, {ledger_seal.MAC_TAG: (
        ledger_seal.mac(self._mac_key(), run_id, params, tags))})
    out.log_params(self.client, run_id, ENTRY_KIND, params)
    out.log_metrics(self.client, run_id, ENTRY_KIND,
                    {"epsilon": entry.epsilon})
    out.end_run(self.client, run_id)
    return run_id

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
    return [run for run in self._entry_runs()
            if run.data.tags.get(PROMOTION_TAG) == promotion
            and not ledger_entry.withdrawn(run)]

  def restore(self, run: Run) -> None:
    """Brings a deleted entry's run back (its charge counts either way)."""
    # MLflow writes to active runs only; a deleted entry comes back for it.
    if run.info.lifecycle_stage == LifecycleStage.DELETED:
      self.client.restore_run(run.info.run_id)

  def _tag(self, run: Run, key: str, value: str) -> None:
    """Sets a tag and the entry's new seal in one write."""
    self.restore(run)
    release.Release().set_tags(
        self.client, run.info.run_id, ENTRY_KIND,
        ledger_seal.sealed(self._mac_key(), run, {key: value}))

  def _mac_key(self) -> bytes:
    return self._key.derive(ledger_seal.MAC_PURPOSE)

  def _entry_runs(self) -> list[Run]:
    """Every entry's run in the store, in any experiment, deleted or not;
    none (and nothing created) before the store exists."""
    if not mlflow_store.store_exists(self.tracking_uri):
      return []
    experiments = [e.experiment_id for e in self.client.search_experiments(
        view_type=ViewType.ALL, max_results=50_000)]
    found: dict[str, Run] = {}
    # By their immutable key id; entries from before it, by their kind.
    for where in (f"params.{_KEY_ID} LIKE '%'",
                  f"tags.`tan_tune.kind` = '{ENTRY_KIND}'"):
      for start in range(0, len(experiments), _EXPERIMENTS_PER_SEARCH):
        for run in self.client.search_runs(
            experiments[start:start + _EXPERIMENTS_PER_SEARCH], where,
            run_view_type=ViewType.ALL, max_results=50_000):
          found[run.info.run_id] = run
    return list(found.values())

  def _ordered(self) -> list[tuple[Entry, ledger_order.Place, bool]]:
    """Every placed entry in the ledger's order, and whether it counts: of
    the store's key, unwithdrawn, and (in the current order) fitting with
    the entries counted before it; entries of an earlier order, or from
    before the order, count unless withdrawn.

    Raises:
      ConfigError: as `entries`.
    """
    if not mlflow_store.store_exists(self.tracking_uri):
      return []
    order, placed = self._placed()
    if not placed:
      return []
    self._check_key(placed)
    mine, mac_key = self._key.key_id(), self._mac_key()
    counted: dict[str, list[Entry]] = {}
    ordered = []
    for place, run in placed:
      keyed = _KEY_ID in run.data.params
      if keyed and run.data.params[_KEY_ID] != mine:
        continue  # Refused by its own reader (`_check_key`).
      if keyed:
        ledger_seal.verify(mac_key, run)
      entry = ledger_entry.from_run(run)
      earlier = counted.setdefault(entry.dataset_identity, [])
      counts = not (keyed and ledger_entry.withdrawn(run)) and (
          place.order != order or entry.promoted_run_id is not None
          or composition_lib.compose(earlier, entry).within_budget)
      if counts:
        earlier.append(entry)
      ordered.append((entry, place, counts))
    return ordered

  def store_key_id(self) -> str | None:
    """The id of the store's ledger key: the key of its first placed entry
    not withdrawn; None before one. Needs no key."""
    return _first_key_id(self._placed()[1])

  def _placed(self) -> tuple[int | None, list[tuple[ledger_order.Place, Run]]]:
    """The current order, and every placed entry's run in the ledger's
    order."""
    order, current = ledger_order.places(self.client)
    return order, sorted(((place, run) for run in self._entry_runs()
                          if (place := _place(run, current))),
                         key=lambda item: item[0])

  def _check_key(self, placed: list[tuple[ledger_order.Place, Run]]) -> None:
    """Refuses a user whose key is not the store's."""
    first = _first_key_id(placed)
    if first not in (None, self._key.key_id()):
      raise ConfigError(
          "ledger key", f"key id {self._key.key_id()}",
          f"the key of this store's ledger (key id {first}); "
          + ledger_key.GET_THE_KEY)

def _place(run: Run, current: dict[str, ledger_order.Place]
           ) -> ledger_order.Place | None:
  """An entry's place: kept, given by the current order, or (from before
  keys had ids) its start; None for a charge not yet placed, which never
  trained."""
  params = run.data.params
  if ledger_order.SEQUENCE_PARAM in params:
    return ledger_order.Place.parse(params[ledger_order.SEQUENCE_PARAM])
  if _KEY_ID in params:
    return current.get(run.info.run_id)
  if "dataset_name" in params:
    return ledger_order.Place(_UNORDERED, run.info.start_time)
  return None


def _first_key_id(placed: list[tuple[ledger_order.Place, Run]]) -> str | None:
  return next((run.data.params[_KEY_ID] for _, run in placed
               if _KEY_ID in run.data.params
               and not ledger_entry.withdrawn(run)), None)
