"""The driver's private parts: a private random search (Papernot & Steinke).

With `tuning_privacy: private_random_search` (`tuning_mode.py`) every trial
is a private run at the reference triplet and the search, not a promotion,
is what spends the budget. In order, the driver:

1. prices the whole search (`privacy/tuning.py`) and refuses it before
   anything is written if the dataset's ledger has no room for it
   (`search_entry`, `charge.check_room`); then charges it
   (`charge.charge`);
2. draws the number of trials K ~ trial_count from the OS's secret source
   (`draw_trial_count`): K is kept in the owner-only search directory and
   never shown, since the bound does not hold if K is published;
3. runs K private trials with hyper-parameters drawn at random (from a
   secret seed) and no MLflow run of their own, each trained on the
   private training data less a validation split keyed by the search's
   secret and scored there by a DP count (`training/private_score.py`);
4. releases the best-scored trial alone (`release`): its hyper-parameters,
   its score, its accuracy on the test split, measured once for it alone,
   and its weights (with their MLflow Model, `served_model.py`) go to the
   search's MLflow run with the search's eps, timed at the run's start
   (`finish`: a duration would count the trials);
   every trial checkpoint, which holds secret generator states, is deleted,
   and so is Ray's staging of the trials' results (`RayStaging`).

Its privacy card (`privacy_card.build_search`) is read from what the search
run publishes before any trial (`parent_fields`, the ledger after the
charge), so with `--register` the version is made at the run's start, as a
promotion's is, and marked `candidate` at the release.
"""

import contextlib
import dataclasses
import pathlib
import random
import secrets
import shutil
import signal
import tempfile
import threading
from typing import Any, Iterator

from ray import tune
from ray.train import constants as ray_train_constants
import torch

from tan_tune import config_io
from tan_tune.errors import ConfigError
from tan_tune.ledger import charge
from tan_tune.ledger import composition as composition_lib
from tan_tune.ledger import ledger as ledger_lib
from tan_tune.registry import model_registry
from tan_tune.registry import privacy_card
from tan_tune.registry import served_model
from tan_tune.search import resolved as resolved_lib
from tan_tune.search import space as search_space_lib
from tan_tune.search import tracking
from tan_tune.search import trial_record
from tan_tune.training import checkpoint_file
from tan_tune.training import datasets
from tan_tune.training import plugins
from tan_tune.training import trial as trial_lib
from tan_tune.training import trial_config

# Trials are scored on the test split (`tuning_mode`): what that means here.
SELECT_ON_TEST_WARNING = (
    "select_on: test ranks the private trials on the test split: the"
    " released test accuracy is the best trial's, so optimistic")
# The released trial's weights, raw and EMA, beside best.json.
MODEL_FILE = "model.pt"
RELEASE_NOTE = (
    "a private random search (Papernot & Steinke 2022): every trial was a"
    " private run at the reference triplet; the number of trials was drawn"
    " secretly and only the best is released; its eps covers the whole"
    " search; this run is timed at its start, since its duration would"
    " count the trials")


def hide_ray_staging() -> None:
  """Makes this node's Ray Train/Tune staging folder owner-only.

  Ray stages every experiment under its session folder, world-readable and
  kept after the search: /tmp/ray/session_*/artifacts/<time>/<name> holds,
  on the driver, each trial's params.json, result.json and progress.csv and
  the experiment's state, and on every node a working folder per trial.
  In a private search these count the trials and hold their results."""
  staging = pathlib.Path(ray_train_constants._get_ray_train_session_dir())  # pylint: disable=protected-access
  staging.mkdir(parents=True, exist_ok=True)
  staging.chmod(0o700)


class RayStaging(tune.Callback):
  """Deletes the driver's staging of a private search once Tune has written
  its last state there (`on_experiment_end`, after the final snapshot);
  the search's own folder keeps what a resume needs."""

  def __init__(self):
    self.folder: pathlib.Path | None = None

  def on_trial_start(self, iteration, trials, trial, **info):
    self.folder = pathlib.Path(
        trial.storage.experiment_driver_staging_path).parent

  def on_experiment_end(self, trials, **info):
    if self.folder is not None:
      shutil.rmtree(self.folder, ignore_errors=True)


def search_entry(resolved: resolved_lib.ResolvedSearch,
                 examples: datasets.Examples, parent_run_id: str
                 ) -> ledger_lib.Entry:
  """The search as one ledger entry of its data's `examples` (which the
  ledger keys): each trial's triplet, the search's eps."""
  space = resolved.space
  return ledger_lib.Entry(
      dataset_identity=examples,
      dataset_name=space.dataset.title,
      promotion=search_charge(parent_run_id),
      triplet=resolved.reference, delta=resolved.delta,
      epsilon=resolved.search_epsilon.epsilon,
      budget=space.reference.target_epsilon, trial_count=space.trial_count,
      score_noise=space.score_noise)


def search_charge(parent_run_id: str) -> str:
  """The ledger entry (`ledger.promotion_key`) of the search whose MLflow
  run is `parent_run_id`."""
  return ledger_lib.promotion_key(parent_run_id, "search")


def parent_fields(resolved: resolved_lib.ResolvedSearch,
                  data: datasets.Dataset) -> dict[str, Any]:
  """The search run's own params, fixed before any trial: the whole
  search's eps, the distribution of K, and what its MLflow Model will be.
  Every trial has EMA weights (`ema_decay` is a number whenever searched,
  0.999 otherwise), so the metric alone says which weights are released."""
  space, epsilon = resolved.space, resolved.search_epsilon
  return {
      "search_epsilon": {**dataclasses.asdict(epsilon),
                         "describe": epsilon.describe()},
      "trial_count": dataclasses.asdict(space.trial_count),
      "served_model": {
          "inputs": served_model.Inputs.of(data).as_dict(),
          "metric": space.metric,
          "weights": served_model.headline_weights(space.metric, True)},
      "model_weights_sha256": (
          plugins.file_digest("model.weights", space.model.weights)
          if space.model.weights else None),
  }


def card(record: tracking.SearchRecord) -> privacy_card.PrivacyCard:
  """The release's privacy card, from the search run's published record."""
  return privacy_card.build_search(privacy_card.Published(
      record.client.get_run(record.parent_run_id), tracking.SEARCH_KIND))


def register(record: tracking.SearchRecord, name: str) -> str:
  """The search run's version of `name`, its card as description: made
  now, before any trial, or found again by a resumed search."""
  return model_registry.register(record.client, name, record.parent_run_id,
                                 card(record))


def refuse_promotion(field: str, value: str) -> None:
  """`tan-tune promote` of a private search: it has released its result."""
  raise ConfigError(
      field, value,
      "a search of simulated trials: this private random search released its"
      " best trial itself (its best.json and model.pt, and its MLflow run),"
      " with an eps for the whole search; promoting would train another"
      " private run")


def opaque_name(trial) -> str:
  """A private trial's name and folder: random, no index, no parameters."""
  del trial
  return f"t{secrets.token_hex(6)}"


@contextlib.contextmanager
def sigterm_stops(private: bool) -> Iterator[None]:
  """SIGTERM stops a private search as Ctrl-C does: Tune saves its state and
  returns, and the driver releases nothing (`all_ended`)."""
  if not private or threading.current_thread() is not threading.main_thread():
    yield
    return
  previous = signal.signal(
      signal.SIGTERM, lambda *_: signal.raise_signal(signal.SIGINT))
  try:
    yield
  finally:
    signal.signal(signal.SIGTERM, previous)


def all_ended(results, trial_count: int) -> bool:
  """Whether all K trials ran to their last step: only then is the search
  what its eps is about. A stopped search (Ctrl-C, SIGTERM, a failed
  trial) keeps its state for `--resume` and releases nothing, or the
  operator, not the secret draw, would choose the number of trials."""
  if len(results) != trial_count:
    return False
  return all(r.error is None and r.checkpoint is not None
             and r.metrics.get("step") is not None
             and r.metrics.get("step") == r.metrics.get("steps_total")
             for r in results)


def draw_trial_count(space: search_space_lib.SearchSpace) -> int:
  """K ~ trial_count, from the OS's cryptographic source."""
  return space.trial_count.draw(random.SystemRandom())


def secret_seed() -> int:
  """A seed for the random search: hyper-parameters drawn i.i.d., unknown."""
  return random.SystemRandom().randrange(2**32)


def release(resolved: resolved_lib.ResolvedSearch, results,
            directory: pathlib.Path, tune_folder: pathlib.Path,
            ranked_by: str) -> dict[str, Any] | None:
  """The release of the finished trial whose result `ranked_by` ranks best
  (its DP score on private validation, or its test accuracy with
  select_on: test), its weights in `directory`/model.pt; None when no trial
  finished (K = 0, or all failed). Deletes Tune's `tune_folder` either
  way.

  On validation, the released weights are measured once on the test split
  here, which no trial saw: that accuracy is the release's honest
  estimate; the best score stays what chose it."""
  space = resolved.space
  sign = -1 if space.mode == "max" else 1
  finished = [r for r in results
              if r.error is None and r.metrics.get(ranked_by) is not None]
  best = min(finished, key=lambda r: sign * r.metrics[ranked_by],
             default=None)
  released = None
  if best is not None:
    config = trial_record.build(resolved, best.config).reference_run
    with best.checkpoint.as_directory() as folder:
      state = checkpoint_file.load(
          pathlib.Path(folder) / checkpoint_file.CHECKPOINT_FILE)
    torch.save({"model": state["model"], "ema": state["ema"],
                "config": config_io.to_dict(config)}, directory / MODEL_FILE)
    epsilon = resolved.search_epsilon  # What the search was charged.
    scored = space.select_on == "validation"
    released = {
        "search_space": space.name,
        "tuning_privacy": space.tuning_privacy,
        "metric": space.metric,
        "select_on": space.select_on,
        "value": best.metrics[ranked_by],
        "test_accuracy": (trial_lib.test_accuracies(config, state) if scored
                          else {k: best.metrics[k]
                                for k in search_space_lib.METRICS
                                if k in best.metrics}),
        "params": best.config,
        "trial_config": config_io.to_dict(config),
        "epsilon": {**dataclasses.asdict(epsilon),
                    "describe": epsilon.describe()},
        "trial_count": {"distribution": space.trial_count.distribution,
                        "mean": space.trial_count.mean,
                        "shape": space.trial_count.shape},
        "note": RELEASE_NOTE,
    }
  # Tune's state holds every trial, K and their secret generator states.
  shutil.rmtree(tune_folder, ignore_errors=True)
  return released


def _log_served_model(resolved, record, model_file: pathlib.Path,
                      released: dict[str, Any],
                      found: privacy_card.PrivacyCard) -> None:
  """The released weights as an MLflow Model on the search's run."""
  config = config_io.from_dict(trial_config.TrialConfig,
                               released["trial_config"])
  servable = served_model.Servable.plan(
      config.model, served_model.Inputs.of(datasets.load_dataset(
          config.dataset)), resolved.space.metric,
      config.optim.ema_decay is not None)
  with tempfile.TemporaryDirectory() as folder:
    record.out.log_folder(
        record.client, record.parent_run_id, tracking.SEARCH_KIND,
        served_model.save_weights(
            pathlib.Path(folder), servable, config.model,
            torch.load(model_file, map_location="cpu", weights_only=False),
            record.out.started, {"search_epsilon": released["epsilon"],
                                 "privacy_card": found.tags()}))


def charge_or_fail(ledger, resolved, examples, record,
                   new_ledger: bool) -> None:
  """Charges a private search to its dataset's ledger; a refusal (another
  run took the room since the first check) fails its parent run. The
  search run then publishes the dataset's composed spend with it."""
  entry = search_entry(resolved, examples, record.parent_run_id)
  try:
    charge.charge(ledger, entry, new_ledger)
  except ConfigError:
    record.end_parent(failed=True, artifacts={})
    raise
  ledger.link(entry.promotion, record.parent_run_id)  # What `ledger` shows.
  earlier = [e for e in ledger.entries(entry.dataset_identity)
             if e.promotion != entry.promotion]
  record.out.log_params(record.client, record.parent_run_id,
                        tracking.SEARCH_KIND,
                        {"ledger": composition_lib.compose(earlier, entry).as_dict()})


def finish(resolved, results, record, directory: pathlib.Path,
           best_file: str, registered: list[str] | None,
           ranked_by: str) -> dict[str, Any] | None:
  """Ends a private search: the best trial alone goes to its MLflow run,
  with its privacy card; its registered version, if any, becomes the
  `candidate` (or is marked failed when nothing is released).

  The search lasts about K trials, so a release time would publish K: the
  run ends, and its release is logged, at the run's own start time."""
  released = release(resolved, results, directory, directory / "tune",
                     ranked_by)
  if released:
    out, client, run_id = record.out, record.client, record.parent_run_id
    out.log_artifact(client, run_id, tracking.SEARCH_KIND,
                     directory / MODEL_FILE)
    found = card(record)
    found.log(out, client, run_id, tracking.SEARCH_KIND)
    _log_served_model(resolved, record, directory / MODEL_FILE, released,
                      found)
    scores = ({"released_validation_score": released["value"]}
              if released["select_on"] == "validation" else {})
    out.log_metrics(
        client, run_id, tracking.SEARCH_KIND,
        {**{f"released_{key}": value
            for key, value in released["test_accuracy"].items()}, **scores})
  if registered:
    model_registry.finish(record.client, *registered, released is not None)
  record.end_parent(failed=released is None,
                    artifacts={best_file: released} if released else {})
  return released
