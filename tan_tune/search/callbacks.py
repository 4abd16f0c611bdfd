"""What the search driver plugs into Ray Tune.

`TrialResources` reserves each trial's CPUs and GPU share (by its batch size),
`DefineByRun` is the space's Optuna define-by-run function in a picklable
form, `PrunedAwareOptunaSearch` tells Optuna the truth about early-stopped
trials (and copies them for `optuna-dashboard`), and `MlflowTrialCallback` keeps exactly one MLflow child run per trial,
from the driver process, even across a resume.
"""

import dataclasses
from typing import Any

import optuna
from ray import tune
from ray.tune import PlacementGroupFactory
from ray.tune.search.optuna import OptunaSearch

from tan_tune import config_io
from tan_tune.search import progress
from tan_tune.search import resolved as resolved_lib
from tan_tune.search import resources as resources_lib
from tan_tune.search import space as search_space_lib
from tan_tune.search import tracking
from tan_tune.search import trial_record
from tan_tune.search import trials


# The Tune trial an Optuna trial in the study's copy came from.
RAY_TRIAL_ID = "ray_trial_id"


@dataclasses.dataclass(frozen=True)
class TrialResources:
  """What Ray reserves for a trial, from the space's `resources`.

  A callable of the trial's config, so that the GPU share can depend on the
  simulation batch size Optuna picked (`resources.gpu_by_batch_size`).
  """

  resources: resources_lib.ResourcesConfig

  def __call__(self, config: dict[str, Any]) -> PlacementGroupFactory:
    gpu = self.resources.gpu_for(
        config[trials.SIMULATION_BATCH_SIZE])
    return PlacementGroupFactory([{"CPU": self.resources.cpu, "GPU": gpu}])


class PrunedAwareOptunaSearch(OptunaSearch):
  """OptunaSearch that tells Optuna the truth and keeps a copy for people.

  Ray's OptunaSearch reports a trial that ASHA stopped as COMPLETE with its
  low-fidelity value, which misleads TPE; a trial stopped before its last step
  is told as pruned instead (its intermediate values are already reported).

  The study the sampler uses stays in memory, saved and restored with Tune's
  experiment state, so a resumed search sees it exactly as Tune does. Each
  finished trial is copied to `study_copy` (an Optuna storage URL, e.g. the
  search directory's sqlite file) for `optuna-dashboard` and the search's
  plots, once per Tune trial: a trial re-run after a resume is not copied
  twice. A study the sampler shared with that file would run ahead of Tune's
  snapshot after a kill, and Optuna refuses results for a trial it saw finish.
  """

  def __init__(self, *args, study_copy: str | None = None, **kwargs):
    super().__init__(*args, **kwargs)
    self._study_copy = study_copy

  def on_trial_result(self, trial_id, result):
    # A scored private trial has no value before its last step.
    if trial_id in self._ot_trials and result.get(self.metric) is not None:
      super().on_trial_result(trial_id, result)  # See `on_trial_complete`.

  def on_trial_complete(self, trial_id, result=None, error=False):
    if result and not error and progress.stopped_early(result):
      result = None  # No value and no error: Optuna records PRUNED.
    ot_trial = self._ot_trials.get(trial_id)
    if ot_trial is None:
      # Killed between Tune's snapshot of its trials and the searcher's:
      # Tune resumes a trial this searcher never suggested. Optuna has no
      # trial to tell; Tune, MLflow and the leaderboard still record it.
      return
    super().on_trial_complete(trial_id, result=result, error=error)
    if self._study_copy:
      self._copy(trial_id, self._ot_study.get_trials(deepcopy=False)[
          ot_trial.number])

  def _copy(self, trial_id: str, finished: optuna.trial.FrozenTrial) -> None:
    copy = optuna.create_study(
        storage=self._study_copy, study_name=self._ot_study.study_name,
        direction=self._ot_study.direction, load_if_exists=True)
    if any(t.user_attrs.get(RAY_TRIAL_ID) == trial_id
           for t in copy.get_trials(deepcopy=False)):
      return
    copy.add_trial(optuna.trial.create_trial(
        state=finished.state, value=finished.value, params=finished.params,
        distributions=finished.distributions,
        intermediate_values=finished.intermediate_values,
        user_attrs={**finished.user_attrs, RAY_TRIAL_ID: trial_id}))


class MlflowTrialCallback(tune.Callback):
  """Keeps each trial's MLflow child run, from the driver process."""

  def __init__(self, tracking_uri: str, experiment_name: str,
               parent_run_id: str, resolved: resolved_lib.ResolvedSearch):
    self.tracking_uri = tracking_uri
    self.experiment_name = experiment_name
    self.parent_run_id = parent_run_id
    self.resolved = resolved
    self._record: tracking.SearchRecord | None = None

  def __getstate__(self):
    # Tuner state is pickled; the MLflow client is rebuilt after a restore.
    state = dict(self.__dict__)
    state["_record"] = None
    return state

  @property
  def record(self) -> tracking.SearchRecord:
    if self._record is None:
      self._record = tracking.SearchRecord(self.tracking_uri,
                                           self.experiment_name,
                                           self.resolved.space.tuning_privacy)
      self._record.parent_run_id = self.parent_run_id
    return self._record

  def _run_id(self, trial, starting: bool = False) -> str:
    run_id, created = self.record.trial_run(trial.trial_id,
                                            dict(trial.config))
    if starting and not created:
      self.record.reopen(run_id)
    if created:
      built = trial_record.build(self.resolved, dict(trial.config),
                                 trial_id=trial.trial_id)
      self.record.log_trial_params(run_id, {
          "hyperparameters": dict(built.params),
          **built.as_params(),  # Its triplets, eta, lr_scale, compute.
          "trial": config_io.to_dict(built.config),
      })
    return run_id

  def on_trial_start(self, iteration, trials, trial, **info):
    self._run_id(trial, starting=True)

  def on_trial_result(self, iteration, trials, trial, result, **info):
    self.record.log_trial_metrics(self._run_id(trial), result,
                                  step=int(result.get("step", 0)))

  def on_trial_complete(self, iteration, trials, trial, **info):
    status = ("pruned" if progress.stopped_early(trial.last_result or {})
              else "finished")
    self.record.end_trial(self._run_id(trial), status)

  def on_trial_error(self, iteration, trials, trial, **info):
    self.record.end_trial(self._run_id(trial), "failed")


@dataclasses.dataclass(frozen=True)
class DefineByRun:
  """The space's define-by-run function in a form plain pickle can save.

  OptunaSearch checkpoints its space with `pickle`, which refuses closures.
  """

  space: search_space_lib.SearchSpace

  def __call__(self, optuna_trial: optuna.trial.Trial) -> dict[str, Any]:
    return trials.define_by_run(self.space)(optuna_trial)
