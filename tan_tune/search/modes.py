"""The built-in tuning strategies, registered by their `tuning_privacy`.

* `SimulatedSearch` (`non_private`, TAN's practice): trials simulate the
  reference run at small batches on the private data, each with an MLflow
  run; Optuna's TPE (or random) search; the search is not accounted and its
  winner is what `promote` takes.
* `PublicDataSearch` (`public_data`): the same on a public dataset; the
  promoted run's eps is then the end-to-end eps.
* `PrivateRandomSearch` (`private_random_search`, Papernot & Steinke): every
  trial a private run at the reference triplet, the search charged to the
  ledger before it starts, K trials drawn secretly, nothing of a trial
  published, the best released by the search itself and never promoted.

Each is a `strategy.TuningStrategy` registered with `tuning_mode.register`,
as a new way of tuning would be (`privacy/tuning.py` has the maths).
"""

import dataclasses
import json
import pathlib
from typing import Any, ContextManager

import optuna
from ray import tune

from tan_tune.errors import ConfigError
from tan_tune.ledger import charge
from tan_tune.ledger import custody
from tan_tune.ledger import ledger as ledger_lib
from tan_tune.privacy import tuning
from tan_tune.release import boundary
from tan_tune.search import callbacks
from tan_tune.search import private_search
from tan_tune.search import progress
from tan_tune.search import resolved as resolved_lib
from tan_tune.search import results as results_lib
from tan_tune.search import schedulers
from tan_tune.search import search_algorithms
from tan_tune.search import search_files
from tan_tune.search import space as space_lib
from tan_tune.search import strategy
from tan_tune.search import tracking
from tan_tune.search import trial_record
from tan_tune.search import tuning_mode
from tan_tune.search.hyperparameters import check
from tan_tune.search.strategy import Finished
from tan_tune.training import checkpoint_file
from tan_tune.training import datasets
from tan_tune.training import private_score
from tan_tune.training import trial_config

# What names a private search's place in a refusal (`custody.py`).
STORAGE_FIELD = "--storage"


@tuning_mode.register
class SimulatedSearch(strategy.TuningStrategy):
  """Trials simulate the reference run; the search is not accounted."""

  name = "non_private"
  note = ("trials are simulations, not private; the search is not"
          " accounted; only the promoted run is")
  guarantee = ("the search is not accounted: the hyper-parameters were"
               " chosen on the private data without a guarantee")

  def parent_fields(self, resolved: resolved_lib.ResolvedSearch,
                    data: datasets.Dataset
                    ) -> tuple[dict[str, Any], dict[str, float]]:
    """The search's own MLflow params and metrics, beyond the reference's."""
    space = resolved.space
    return {
        "simulation_batch_sizes": list(space.simulation_batch_sizes),
        "compute_saving": [space.reference.batch_size / b
                           for b in space.simulation_batch_sizes],
        "num_trials": space.num_trials,
        "public_dataset": (space.public_dataset.title if space.public_dataset
                           else None),
    }, {}

  def callbacks(self, resolved: resolved_lib.ResolvedSearch,
                tracking_uri: str, record: tracking.SearchRecord,
                trial_count: int) -> list[tune.Callback]:
    """One MLflow run per trial, and the live view."""
    space = resolved.space
    return [callbacks.MlflowTrialCallback(tracking_uri, space.name,
                                          record.parent_run_id, resolved),
            progress.SearchProgress(space.name, space.metric, space.mode,
                                    trial_count)]

  def trial_run(self, resolved: resolved_lib.ResolvedSearch,
                params: dict[str, Any]) -> trial_config.TrialConfig:
    """What a trial trains: a simulation of the reference run."""
    return trial_record.build(resolved, params).config

  def finish(self, resolved: resolved_lib.ResolvedSearch, results,
             record: tracking.SearchRecord, directory: pathlib.Path,
             state: dict[str, Any], resumed: bool) -> Finished:
    """The leaderboard and winner, written for `promote`; the parent run
    ends with them and the search's pictures."""
    space = resolved.space
    trials = results_lib.trial_records(results, resolved)
    leaderboard = results_lib.leaderboard(trials, space, record)
    if resumed:
      record.delete_unknown_trials({row["trial_id"] for row in leaderboard})
    best = results_lib.best_trial(leaderboard, trials, resolved, record)
    if best:
      (directory / search_files.BEST_FILE).write_text(
          json.dumps(best, indent=2))
    (directory / search_files.LEADERBOARD_FILE).write_text(
        json.dumps(leaderboard, indent=2))
    record.end_parent(
        failed=all(row["status"] == "failed" for row in leaderboard),
        artifacts={search_files.LEADERBOARD_FILE: leaderboard,
                   search_files.BEST_FILE: best},
        pictures=results_lib.draw(space, directory, leaderboard, record),
    )
    return Finished(leaderboard, best)


@tuning_mode.register
class PublicDataSearch(SimulatedSearch):
  """Trials simulate the reference run on declared public data."""

  name = "public_data"
  note = ("trials are simulations on public data; the promoted run's eps is"
          " the end-to-end eps")
  guarantee = ("the search ran on public data: the promoted run's eps is"
               " the end-to-end eps")
  fields = frozenset({"public_dataset"})

  def check_space(self, space) -> None:
    """The public data trials run on: declared, and not the private data."""
    check(space.public_dataset is not None, "public_dataset", None,
          f"required with tuning_privacy {self.name}: the public data the"
          " trials run on")
    check(space.public_dataset != space.dataset, "public_dataset",
          space.public_dataset.title,
          "a dataset other than the private `dataset` the search promotes"
          f" on: searching the private data is not {self.name}")
    super().check_space(space)

  def check_data(self, space, data) -> None:
    """Other examples than the private data's, enough for every batch."""
    tuning_mode.check_public_dataset(
        space, data, datasets.load_dataset(space.public_dataset))


@tuning_mode.register
class PrivateRandomSearch(strategy.TuningStrategy):
  """Every trial a private run; the whole search accounted and released."""

  name = tuning.PRIVATE_RANDOM_SEARCH
  note = private_search.RELEASE_NOTE
  guarantee = ("end to end: a private random search (Papernot & Steinke"
               " 2022) whose best run alone is released")
  secret = True
  fields = frozenset({"trial_count", "score_noise"})
  select_on_test_warning = private_search.SELECT_ON_TEST_WARNING

  def check_space(self, space) -> None:
    """What Papernot & Steinke's bound covers (`privacy/tuning.py`)."""
    super().check_space(space)
    why = "in a private random search"
    check(space.trial_count is not None, "trial_count", None,
          f"required with tuning_privacy {self.name}: e.g."
          " {distribution: logarithmic, mean: 10}")
    independent = [name for name in search_algorithms.names()
                   if not search_algorithms.named(name).adaptive]
    check(not search_algorithms.named(space.search_algorithm).adaptive,
          "sampler", space.search_algorithm,
          f"{_either(independent)} {why}: Papernot & Steinke cover"
          " hyper-parameters drawn independently of earlier trials, which"
          " TPE is not")
    alone = [name for name in schedulers.names()
             if not schedulers.named(name).uses_other_trials]
    check(not schedulers.named(space.scheduler).uses_other_trials,
          "scheduler", space.scheduler,
          f"{_either(alone)} {why}: ASHA stops trials on other trials'"
          " results, which the accounting does not cover")
    check(space.steps_grid is None, "steps_grid", space.steps_grid,
          f"unset {why}: every trial runs the reference triplet")
    check(tuple(space.simulation_batch_sizes) == (space.reference.batch_size,),
          "simulation_batch_sizes", list(space.simulation_batch_sizes),
          f"[{space.reference.batch_size}] (B_ref) {why}: every trial is a"
          " private run at the reference triplet")
    if space.select_on == "validation":
      check(space.score_noise is not None, "score_noise", None,
            f"required {why} selecting on validation: the standard deviation"
            " s of the Gaussian noise on each trial's count of correct"
            " validation predictions, e.g. 10 (or select_on: test, whose"
            " released accuracy is optimistic)")
    else:
      check(space.score_noise is None, "score_noise", space.score_noise,
            "unset with select_on: test, whose scores are not noised")
    check(space.reference.target_epsilon is not None,
          "reference.target_epsilon", None,
          f"required {why}: the budget the whole search must fit")
    try:
      for scheme in space.reference_schemes():
        tuning.require_search_scheme(scheme)
    except ConfigError as error:
      raise ConfigError("reference.sampling", space.reference.sampling,
                        error.allowed) from None

  def check_data(self, space, data) -> None:
    """A validation split whose noisy score still ranks trials."""
    super().check_data(space, data)
    if space.select_on == "validation":
      private_score.check_useful(space.validation_fraction, space.score_noise,
                                 data.num_train)

  def search_epsilon(self, space, reference, delta):
    return tuning.search_epsilon(reference, delta, space.trial_count,
                                 space.score_noise)

  def ranked_by(self, space) -> str:
    return "score" if space.select_on == "validation" else space.metric

  def refuse_promotion(self, field, value) -> None:
    private_search.refuse_promotion(field, value)

  def check_options(self, num_samples, register) -> None:
    if num_samples:
      raise ConfigError("--num-samples", num_samples,
                        "unset in a private random search: its number of"
                        " trials is drawn secretly from trial_count")

  def check_resume(self, state, directory) -> None:
    """A released search resumes nowhere; an unreleased one only in its
    own place (`custody.py`)."""
    if "released" in state:
      raise FileExistsError(f"the private search in {directory} has ended"
                            " and released its result: nothing to resume")
    ledger = ledger_lib.Ledger(state["tracking_uri"])
    charged = private_search.search_charge(state["parent_run_id"])
    custody.require_unfinished(ledger, charged, directory, STORAGE_FIELD)
    custody.take(ledger, charged, directory, STORAGE_FIELD)

  def held(self, directory) -> ContextManager[None]:
    return custody.held(directory, STORAGE_FIELD)

  def protect(self, directory) -> None:
    directory.chmod(0o700)  # Its trials' checkpoints and K are secrets.

  def check_room(self, ledger, resolved, examples, new_ledger) -> None:
    charge.check_room(
        ledger,
        private_search.search_entry(resolved, examples, "not yet started"),
        new_ledger)

  def parent_fields(self, resolved, data):
    return private_search.parent_fields(resolved, data), {
        "search_epsilon": resolved.search_epsilon.epsilon}

  def start(self, ledger, resolved, examples, record, new_ledger,
            register, directory) -> dict[str, Any]:
    """Charges the search, registers its release-to-be if asked (the
    registry dates a version itself: made now, it tells only the start),
    then draws K secretly (kept in the owner-only search state until the
    release)."""
    private_search.charge_or_fail(ledger, resolved, examples, record,
                                  new_ledger)
    custody.take(ledger, private_search.search_charge(record.parent_run_id),
                 directory, STORAGE_FIELD)
    registered = ([register, private_search.register(record, register)]
                  if register else None)
    return {"registered": registered,
            "trial_count": private_search.draw_trial_count(resolved.space)}

  def seal(self, ledger, state) -> checkpoint_file.Seal:
    return custody.seal(
        ledger, private_search.search_charge(state["parent_run_id"]), None)

  def trial_count(self, state, space, num_samples) -> int:
    return state["trial_count"]

  def search_algorithm(self, space) -> optuna.samplers.BaseSampler:
    # Hyper-parameters drawn independently (`check_space`), from a seed no
    # one knows.
    return search_algorithms.named(space.search_algorithm).sampler(
        private_search.secret_seed())

  def study_copy(self, directory) -> str | None:
    return None  # The study lists every trial.

  def callbacks(self, resolved, tracking_uri, record, trial_count):
    # No MLflow run per trial; Ray's copy of their results is deleted.
    return [private_search.RayStaging(),
            progress.SecretSearchProgress(resolved.space.name)]

  def trial_names(self) -> dict[str, Any]:
    # Ray's default names count the trials and list their parameters.
    return {"trial_name_creator": private_search.opaque_name,
            "trial_dirname_creator": private_search.opaque_name}

  def before_fit(self) -> None:
    private_search.hide_ray_staging()

  def trial_run(self, resolved, params):
    """Each trial is a private run at the reference triplet itself (the
    file's one simulation batch size is B_ref), scored on a private
    validation split unless it selects on test."""
    run = trial_record.build(resolved, params).reference_run
    space = resolved.space
    if space.select_on != "validation":
      return run
    return dataclasses.replace(run, score=private_score.PrivateScore(
        space.validation_fraction, space.score_noise, space.metric))

  def on_worker(self, params) -> None:
    boundary.worker_setup()  # This node's copy of Ray's trial folders.
    private_search.hide_ray_staging()

  def stops(self) -> ContextManager[None]:
    return private_search.sigterm_stops(True)

  def finish(self, resolved, results, record, directory, state,
             resumed) -> Finished:
    """Releases the best trial only when all K trials ended; else keeps the
    state for `--resume` and releases nothing."""
    if not private_search.all_ended(results, state.get("trial_count", 0)):
      return Finished([], None, stopped=True)
    custody.finish(ledger_lib.Ledger(state["tracking_uri"]),
                   private_search.search_charge(state["parent_run_id"]),
                   directory, STORAGE_FIELD)
    released = private_search.finish(resolved, results, record, directory,
                                     search_files.BEST_FILE,
                                     state.get("registered"),
                                     self.ranked_by(resolved.space))
    state.pop("trial_count", None)  # Secret, and of no use once released.
    state["released"] = released is not None
    (directory / search_files.STATE_FILE).write_text(
        json.dumps(state, indent=2))
    if released:
      (directory / search_files.BEST_FILE).write_text(
          json.dumps(released, indent=2))
    return Finished([], released)


def _either(names: list[str]) -> str:
  """'a' or 'a' or 'b': what a field may be instead."""
  return " or ".join(map(repr, names))


def for_space(space: space_lib.SearchSpace) -> strategy.TuningStrategy:
  """The strategy of a search file's `tuning_privacy`."""
  return tuning_mode.named(space.tuning_privacy)
