"""What a tuning strategy is: the points where ways of tuning differ.

The driver (`driver.py`) runs every search the same way and asks its
strategy at each point where the ways of tuning differ: which fields of the
search file it reads, what a trial trains, what is published of it, how the
search is accounted, how it ends. A strategy must say what its trials train
(`trial_run`), what the search run publishes before them (`parent_fields`)
and of each (`callbacks`), and how the search ends (`finish`); every other
point has a default here: trials that publish what they like, a search that
charges nothing and releases no model, Optuna proposing with the file's
`sampler` at its seed. The built-ins are `modes.py`'s; a strategy is chosen
by its `name`, registered with `tuning_mode.register`.
"""

import abc
import contextlib
import dataclasses
import pathlib
from typing import Any, ClassVar, ContextManager

import optuna
from ray import tune

from tan_tune.errors import ConfigError
from tan_tune.ledger import ledger as ledger_lib
from tan_tune.privacy import accounting
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.search import resolved as resolved_lib
from tan_tune.search import results as results_lib
from tan_tune.search import search_algorithms
from tan_tune.search import space as space_lib
from tan_tune.search import tracking
from tan_tune.search import tuning_mode
from tan_tune.search.hyperparameters import check
from tan_tune.training import checkpoint_file
from tan_tune.training import datasets
from tan_tune.training import trial_config


@dataclasses.dataclass(frozen=True)
class Finished:
  """What a search's end leaves: its leaderboard (empty when its trials are
  secret), its winner or release, and whether it stopped before its end."""

  leaderboard: list[dict[str, Any]]
  best: dict[str, Any] | None
  stopped: bool = False


class TuningStrategy(abc.ABC):
  """One way of running and accounting a search.

  Attributes:
    name: its spelling in the search file's `tuning_privacy`.
    note: what the search's MLflow run says of its trials and eps.
    guarantee: what every eps shown of its promoted run or release covers.
    secret: its trials are private runs: nothing of them is published, and
      the search runs inside a private boundary (`boundary.py`).
    fields: the search file's fields that only some strategies read
      (`public_dataset`, `trial_count`, `score_noise`) which this one
      reads; the others must be unset.
    select_on_test_warning: what `select_on: test` warns of.
  """

  name: ClassVar[str]
  note: ClassVar[str]
  guarantee: ClassVar[str]
  secret: ClassVar[bool] = False
  fields: ClassVar[frozenset[str]] = frozenset()
  select_on_test_warning: ClassVar[str] = space_lib.SELECT_ON_TEST_WARNING

  def check_space(self, space: space_lib.SearchSpace) -> None:
    """Raises ConfigError for a field of the search file this strategy
    forbids: by default, the fields only other strategies read."""
    if "public_dataset" not in self.fields:
      check(space.public_dataset is None, "public_dataset",
            getattr(space.public_dataset, "name", None),
            f"only with tuning_privacy {tuning_mode.reading('public_dataset')}")
    if "trial_count" not in self.fields:
      check(space.trial_count is None, "trial_count", space.trial_count,
            f"only with tuning_privacy {tuning_mode.reading('trial_count')}"
            " (num_trials counts the others)")
    if "score_noise" not in self.fields:
      check(space.score_noise is None, "score_noise", space.score_noise,
            f"only with tuning_privacy {tuning_mode.reading('score_noise')}"
            " (the others score trials without noise)")

  def ranked_by(self, space: space_lib.SearchSpace) -> str:
    """The key of a trial's results that ranks it: the file's metric."""
    return space.metric

  def search_epsilon(self, space: space_lib.SearchSpace,
                     reference: triplet_lib.PrivacyTriplet,
                     delta: float) -> accounting.EpsilonReport | None:
    """The eps of the whole search at the reference triplet; None for a
    search that is not accounted (only its promoted run is)."""
    return None

  def check_options(self, num_samples: int | None,
                    register: str | None) -> None:
    """Raises ConfigError for a command-line option the strategy forbids:
    by default a registration, since the search releases no model."""
    if register:
      raise ConfigError(
          "--register", register,
          "unset: this search releases no model (its trials are"
          " simulations); promote its winner with `tan-tune promote"
          " --register`, or register a private random search's release")

  def check_data(self, space: space_lib.SearchSpace,
                 data: datasets.Dataset) -> None:
    """Raises ConfigError for data the strategy cannot search, once
    loaded."""

  def check_resume(self, state: dict[str, Any],
                   directory: pathlib.Path) -> None:
    """Raises FileExistsError for a search state that cannot resume."""

  def refuse_promotion(self, field: str, value: str) -> None:
    """Raises ConfigError when `tan-tune promote` may not take the search:
    by default it may."""

  def protect(self, directory: pathlib.Path) -> None:
    """The new search directory, before anything is written in it."""

  def held(self, directory: pathlib.Path) -> ContextManager[None]:
    """Around the whole search: whether another process may run in its
    directory meanwhile."""
    return contextlib.nullcontext()

  def check_room(self, ledger: ledger_lib.Ledger,
                 resolved: resolved_lib.ResolvedSearch,
                 examples: datasets.Examples | None,
                 new_ledger: bool) -> None:
    """Before anything is written: by default the search charges nothing.
    `examples`: the private data's (`datasets.examples`); None on a
    resumed search."""

  @abc.abstractmethod
  def parent_fields(self, resolved: resolved_lib.ResolvedSearch,
                    data: datasets.Dataset
                    ) -> tuple[dict[str, Any], dict[str, float]]:
    """The search's own MLflow params and metrics, beyond the reference's."""

  def start(self, ledger: ledger_lib.Ledger,
            resolved: resolved_lib.ResolvedSearch,
            examples: datasets.Examples | None,
            record: tracking.SearchRecord, new_ledger: bool,
            register: str | None,
            directory: pathlib.Path) -> dict[str, Any]:
    """Once the parent run exists: what the search state keeps besides it."""
    return {}

  def seal(self, ledger: ledger_lib.Ledger,
           state: dict[str, Any]) -> checkpoint_file.Seal | None:
    """How the trials seal their checkpoints (`custody.py`): by default
    they are not sealed."""
    return None

  def trial_count(self, state: dict[str, Any], space: space_lib.SearchSpace,
                  num_samples: int | None) -> int:
    """How many trials: by default --num-samples, else the file's."""
    return num_samples or space.num_trials

  def search_algorithm(
      self, space: space_lib.SearchSpace) -> optuna.samplers.BaseSampler:
    """Optuna's sampler: by default the file's, at the file's seed."""
    return search_algorithms.named(space.search_algorithm).sampler(space.seed)

  def study_copy(self, directory: pathlib.Path) -> str | None:
    """Where Optuna's study is copied for plots and `optuna-dashboard`;
    None for none."""
    return results_lib.study_storage(directory)

  @abc.abstractmethod
  def callbacks(self, resolved: resolved_lib.ResolvedSearch,
                tracking_uri: str, record: tracking.SearchRecord,
                trial_count: int) -> list[tune.Callback]:
    """What Tune tells of each trial as it runs (MLflow, the live view)."""

  def trial_names(self) -> dict[str, Any]:
    """Tune's trial naming: by default Ray's (ids and parameters)."""
    return {}

  def before_fit(self) -> None:
    """In the driver, before Tune stages anything."""

  @abc.abstractmethod
  def trial_run(self, resolved: resolved_lib.ResolvedSearch,
                params: dict[str, Any]) -> trial_config.TrialConfig:
    """What a trial with Optuna's `params` trains."""

  def on_worker(self, params: dict[str, Any]) -> None:
    """In a trial's worker, before it trains."""

  def stops(self) -> ContextManager[None]:
    """Around Tune's fit: how a signal stops the search."""
    return contextlib.nullcontext()

  @abc.abstractmethod
  def finish(self, resolved: resolved_lib.ResolvedSearch, results,
             record: tracking.SearchRecord, directory: pathlib.Path,
             state: dict[str, Any], resumed: bool) -> Finished:
    """The search's end: what it writes and publishes of its trials."""
