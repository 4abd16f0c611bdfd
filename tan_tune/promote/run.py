"""Running a promotion plan: the one private, full-budget reference run.

In order, after `promotion.plan_promotion` has passed the privacy gate:

0. The privacy ledger (`attempts.py`): the store must hold the search's run
   and know the dataset (or `--new-ledger`); a trial with an earlier
   promoted run that finished or was deleted is refused: a second run on
   the same data spends the budget again. The attempt is charged to its
   dataset before anything trains, under its own entry (a resumed attempt
   finds its own), then the dataset's composed spend is checked again
   (another promotion may have charged it in between). The attempt is held
   in custody (`custody.py`): its folder, its configuration, its sealed
   checkpoints, finished once.
1. The promoted MLflow run: in the search's experiment, tagged
   `tan_tune.kind = promoted`, linked by tags to the search's parent run and
   the source trial's run; the attempt's ledger entry names it alone. With
   `register`, its version in the Model Registry is made now, before
   anything trains (`registration.py`: the registry dates it).
2. Calibration (optional): the winner at B_ref / 64, / 32, / 16, same S, as
   Ray tasks, each a nested (not private) run trained on the whole training
   set and scored on test, as the reference run will be. They give the
   scaling-law fit and its prediction at B_ref (without them, the search's
   own points at other batch sizes do).
3. The reference run: Ray Train's TorchTrainer with N data-parallel workers
   (`worker.train_worker`), checkpointing at every evaluation.
4. The final epsilon for every accountant of the run's sampling scheme,
   checked against the target again; the weights, their MLflow Model and
   the privacy card; predicted vs actual; a registered version becomes the
   `candidate`.

The state lives in `<search dir>/promote/<trial id>/`, owner-only: the same
command after a killed driver resumes the same MLflow run from the last
checkpoint (Ray Train restores a run of the same name and storage), there
and nowhere else; Ray Train restarts a killed worker, up to twice. The
checkpoints hold the secret generator states, so they go once the run has
finished and its weights are saved.
"""

import dataclasses
import json
import pathlib
import shutil
from typing import Any

from mlflow import MlflowClient
import ray
import ray.train
import torch

from tan_tune import config_io
from tan_tune import console as console_lib
from tan_tune import mlflow_store
from tan_tune.ledger import charge
from tan_tune.ledger import custody
from tan_tune.ledger import ledger as ledger_lib
from tan_tune.privacy import report as privacy_report_lib
from tan_tune.promote import attempts
from tan_tune.promote import calibration_runs
from tan_tune.promote import gate
from tan_tune.promote import learning_curve
from tan_tune.promote import plan as promotion
from tan_tune.promote import progress
from tan_tune.promote import ray_train
from tan_tune.promote import registration
from tan_tune.promote import scaling_law
from tan_tune.registry import privacy_card
from tan_tune.release import boundary
from tan_tune.release import release as release_lib
from tan_tune.training import checkpoint_file
from tan_tune.training import fixed_features

STATE_FILE = attempts.STATE_FILE
MODEL_FILE = "model.pt"
# Ray Train's storage: checkpoints with secret generator states.
TRAIN_FOLDER = "train"
SCALING_JSON = "scaling_law.json"
SCALING_PNG = "scaling_law.png"
SEARCH_RUN_TAG = attempts.SEARCH_RUN_TAG
SOURCE_TRIAL_TAG = attempts.SOURCE_TRIAL_TAG
SOURCE_RUN_TAG = "tan_tune.source_trial_run_id"
# The promoted run's kind of MLflow run, and so its allow-list.
KIND = registration.KIND
SEARCH_FIELD = "search directory"  # Names the promotion's place.


class PromotionFailed(RuntimeError):
  """The reference run did not finish; its MLflow run is marked FAILED."""


@dataclasses.dataclass(frozen=True)
class PromotionResult:
  """A finished promotion.

  Attributes:
    run_id: the promoted MLflow run.
    directory: its state, checkpoints and weights.
    metrics: the reference run's last evaluation.
    privacy: the final epsilons of the run, one per accountant.
    scaling: the fit, its prediction at B_ref and the actual value; None
      without one.
    model_path: the weights (raw and EMA) with the run's config.
    registered: (name, version) in the Model Registry; None unregistered.
  """

  run_id: str
  directory: pathlib.Path
  metrics: dict[str, Any]
  privacy: privacy_report_lib.PrivacyReport
  scaling: dict[str, Any] | None
  model_path: pathlib.Path
  registered: tuple[str, str] | None = None


def promotion_directory(plan: promotion.PromotionPlan) -> pathlib.Path:
  return attempts.folder(plan.outcome.directory, plan.trial["trial_id"])


def run_promotion(
    plan: promotion.PromotionPlan, out: release_lib.Release,
    address: str | None = None, register: str | None = None,
) -> PromotionResult:
  """Runs the plan to the end, or resumes it; everything it publishes goes
  through `out`, whose caller seals its files when the command ends.
  `register` names the registered model the run becomes a version of.

  Raises:
    ConfigError: no Ray cluster answers at `address`.
    PromotionRefused: the trial was already promoted, its unfinished
      promotion lost its state, or the ledger's budget went since the plan.
    PromotionFailed: training failed; the MLflow run says FAILED.
  """
  directory = promotion_directory(plan)
  # Connected first: a wrong address opens no MLflow run.
  with boundary.private_run(boundary.run_key("promote", directory),
                            address) as private, custody.held(
                                directory, SEARCH_FIELD):
    return _run(plan, directory, private.key, out, register)


def _run(plan: promotion.PromotionPlan, directory: pathlib.Path,
         key: str, out: release_lib.Release,
         register: str | None) -> PromotionResult:
  """The promotion, inside its boundary (`release/boundary.py`)."""
  out.covers(plan.outcome.directory, plan.outcome.tracking_uri)
  out.warn_if_stat_able()
  ledger = ledger_lib.Ledger(plan.outcome.tracking_uri)
  entry = _charge_ledger(plan, ledger, directory)
  custody.require_config(ledger, entry, directory, SEARCH_FIELD)
  custody.take(ledger, entry.promotion, directory, SEARCH_FIELD)
  seal = custody.seal(ledger, entry.promotion, plan.config)
  directory.chmod(0o700)  # No other user may read its checkpoints.
  client = MlflowClient(plan.outcome.tracking_uri)
  run_id = _promoted_run(client, plan, directory, out)
  attempts.link(ledger, entry, run_id)
  version = None
  try:
    version = registration.register(client, run_id, register)
    # Fixed features, computed once inside the boundary for every task and
    # worker to read from Ray's object store (`fixed_features.py`).
    shared = ray.put(fixed_features.for_networks(
        plan.config.dataset, [plan.config.model],
        [plan.config.augment.family], torch.device("cpu")))
    # Calibration points only when there are some: the search's are scored
    # on validation, after training on less of the data.
    points = (calibration_runs.train(plan, client, run_id, directory, shared)
              if plan.calibration else plan.scaling_points)
    fitted = plan.fit_scaling(points)
    scaling = None
    if fitted:
      scaling = _log_prediction(plan, client, run_id, directory, fitted,
                                out)
    outcome = _train(plan, run_id, directory, key, shared, seal)
    custody.finish(ledger, entry.promotion, directory, SEARCH_FIELD)
    privacy = gate.check_spent(plan.triplet, plan.privacy.delta,
                               plan.privacy.scheme, plan.target_epsilon,
                               outcome["metrics"]["step"])
    model_path = _save_model(plan, outcome["checkpoint"], directory, privacy)
    metrics = outcome["metrics"]
    if scaling:
      scaling = _log_actual(plan, client, run_id, directory, fitted, scaling,
                            metrics[plan.outcome.space.metric], out)
    out.log_artifact(client, run_id, KIND, model_path, "model")
    registration.publish(client, run_id, plan.served, plan.config.model,
                         model_path, out)
    out.log_artifact(client, run_id, KIND, learning_curve.draw(
        outcome["history"], plan.outcome.space.metric,
        privacy.epsilon.accountant, directory / learning_curve.FILE), "plots")
    out.log_json(client, run_id, KIND, privacy.as_dict(), "privacy.json")
    out.log_metrics(client, run_id, KIND, {
        **{f"final_epsilon_{name}": report.epsilon
           for name, report in privacy.epsilons.items()},
        "final_eps_tan": privacy.eps_tan})
    out.set_tags(client, run_id, KIND, {
        "tan_tune.worker_node_ids": ",".join(outcome["node_ids"])})
  except Exception as error:
    out.set_tags(client, run_id, KIND, {mlflow_store.STATUS_TAG: "failed"})
    out.end_run(client, run_id, "FAILED")
    registration.finish(client, register, version, finished=False)
    _write_state(directory, run_id, plan, "failed")
    raise PromotionFailed(
        f"the reference run failed ({type(error).__name__}: {error}); its"
        f" MLflow run {run_id} is marked FAILED. Run the same command to"
        f" resume from the last checkpoint in {directory}") from error
  out.set_tags(client, run_id, KIND, {mlflow_store.STATUS_TAG: "finished"})
  out.end_run(client, run_id)
  registration.finish(client, register, version, finished=True)
  _write_state(directory, run_id, plan, "finished")
  # Last: a failure before this point resumes from these checkpoints.
  shutil.rmtree(directory / TRAIN_FOLDER, ignore_errors=True)
  return PromotionResult(run_id, directory, metrics, privacy, scaling,
                         model_path, (register, version) if version else None)


def _charge_ledger(plan: promotion.PromotionPlan, ledger: ledger_lib.Ledger,
                   directory: pathlib.Path) -> ledger_lib.Entry:
  """Charges this attempt to the dataset, then checks the composition again
  (`charge.reserve_and_recheck`, refused by the gate).

  Returns:
    the attempt's entry: a resumed attempt's own, or a new one.

  Raises:
    ConfigError: the store does not hold the search, or has no ledger for
      the dataset and the plan has no `--new-ledger`.
    PromotionRefused: an earlier promotion of the trial rules this one out
      (`attempts.refuse_earlier`), or another promotion charged the dataset
      since the plan and both no longer fit; this charge is then withdrawn.
  """
  search_run_id, trial_id = plan.outcome.parent_run_id, plan.trial["trial_id"]
  experiment_id = attempts.check_store(ledger, search_run_id,
                                       plan.ledger_entry, plan.new_ledger)
  state = attempts.read_state(directory)
  attempts.refuse_earlier(
      attempts.earlier_runs(ledger.client, experiment_id, search_run_id,
                            trial_id), trial_id, state, directory)
  attempt = attempts.current(plan.outcome.tracking_uri, state)
  if attempt != state.get("attempt"):
    # Kept before the charge: after a crash, the same command finds it.
    _write_state(directory, None, plan, "charging", attempt)
  entry = dataclasses.replace(plan.ledger_entry,
                              promotion=ledger_lib.promotion_key(
                                  search_run_id, trial_id, attempt))
  charge.reserve_and_recheck(
      ledger, entry,
      lambda composition: gate.check_ledger(
          composition, plan.outcome.space.dataset.title))
  return entry


def _write_state(directory: pathlib.Path, run_id: str | None,
                 plan: promotion.PromotionPlan, status: str,
                 attempt: str | None = None) -> None:
  """The promotion's state; its attempt stays the one `_charge_ledger` wrote
  unless `attempt` starts a new one."""
  attempts.write_state(directory, {
      "attempt": attempt or attempts.read_state(directory).get("attempt"),
      "run_id": run_id,
      "status": status,
      "tracking_uri": plan.outcome.tracking_uri,
      "search_run_id": plan.outcome.parent_run_id,
      "trial_id": plan.trial["trial_id"],
  })


def _promoted_run(
    client: MlflowClient, plan: promotion.PromotionPlan,
    directory: pathlib.Path, out: release_lib.Release,
) -> str:
  """The promoted run: created, or found again to resume it (then `out`
  keeps its first start); any other earlier run of the trial was refused
  before the charge."""
  search_run_id, trial_id = plan.outcome.parent_run_id, plan.trial["trial_id"]
  experiment_id = client.get_run(search_run_id).info.experiment_id
  run_id = attempts.read_state(directory).get("run_id")
  earlier = attempts.earlier_runs(client, experiment_id, search_run_id,
                                  trial_id)
  if run_id in {run.info.run_id for run in earlier}:
    console_lib.say(f"[tan-tune] resuming promoted run {run_id} from"
                    f" {directory}")
    out.resume(client, run_id)
    client.update_run(run_id, status="RUNNING")
    out.set_tags(client, run_id, KIND, {mlflow_store.STATUS_TAG: "running"})
    if not client.get_run(run_id).data.params:  # Stopped before they were.
      _log_plan(client, run_id, plan, out)
    return run_id
  tags = {
      mlflow_store.STATUS_TAG: "running",
      SEARCH_RUN_TAG: search_run_id,
      SOURCE_TRIAL_TAG: trial_id,
      "tan_tune.search_space": plan.outcome.space.name,
      "tan_tune.private": "true",
      "tan_tune.simulated": "false",
      # non_private: this eps is the run's alone, the search is not accounted.
      mlflow_store.TUNING_TAG: plan.outcome.space.tuning_privacy,
      **privacy_card.code_tags(),
      **{f"tan_tune.{key}": getattr(plan.privacy.epsilon, key)
         for key in ("accountant", "adjacency", "sampling")},
  }
  if plan.trial.get("mlflow_run_id"):
    tags[SOURCE_RUN_TAG] = plan.trial["mlflow_run_id"]
  run_id = out.create_run(client, experiment_id, KIND, f"promote-{trial_id}",
                          tags)
  _write_state(directory, run_id, plan, "running")
  _log_plan(client, run_id, plan, out)
  return run_id


def _log_plan(client: MlflowClient, run_id: str,
              plan: promotion.PromotionPlan, out: release_lib.Release) -> None:
  summary = plan.as_dict()
  for key in ("scaling_law", "calibration_batch_sizes"):
    summary.pop(key)  # They change once calibration runs: artifacts instead.
  out.log_params(client, run_id, KIND, summary)
  out.log_metrics(client, run_id, KIND, {
      f"planned_epsilon_{name}": report.epsilon
      for name, report in plan.privacy.epsilons.items()})


def _log_prediction(
    plan: promotion.PromotionPlan, client: MlflowClient, run_id: str,
    directory: pathlib.Path, fitted: scaling_law.ScalingFit,
    out: release_lib.Release,
) -> dict[str, Any]:
  """Logs the scaling law's prediction at B_ref before training."""
  reference_batch = plan.triplet.batch_size
  summary = fitted.as_dict(reference_batch)
  low, high = summary["interval"]
  out.log_metrics(client, run_id, KIND, {
      "predicted_" + plan.outcome.space.metric: summary["predicted_accuracy"],
      "predicted_low": low, "predicted_high": high})
  console_lib.say(
      f"[tan-tune] predicted {plan.outcome.space.metric} at B ="
      f" {reference_batch}: {summary['predicted_accuracy']:.4f}, 90% interval"
      f" [{low:.4f}, {high:.4f}] ({summary['law']} law)")
  _log_scaling_artifacts(plan, client, run_id, directory, fitted, summary,
                         out)
  return summary


def _log_actual(
    plan: promotion.PromotionPlan, client: MlflowClient, run_id: str,
    directory: pathlib.Path, fitted: scaling_law.ScalingFit,
    summary: dict[str, Any], actual: float, out: release_lib.Release,
) -> dict[str, Any]:
  """Adds the promoted run's value beside the prediction."""
  summary = dict(summary, actual=actual,
                 error=actual - summary["predicted_accuracy"])
  low, high = summary["interval"]
  summary["within_interval"] = bool(low <= actual <= high)
  out.log_metrics(client, run_id, KIND,
                  {"prediction_error": summary["error"]})
  _log_scaling_artifacts(plan, client, run_id, directory, fitted, summary,
                         out, actual)
  return summary


def _log_scaling_artifacts(plan, client, run_id, directory, fitted, summary,
                           out, actual=None) -> None:
  directory.mkdir(parents=True, exist_ok=True)
  (directory / SCALING_JSON).write_text(json.dumps(summary, indent=2))
  scaling_law.plot(fitted, plan.triplet.batch_size, directory / SCALING_PNG,
                   metric=plan.outcome.space.metric, actual=actual)
  for name in (SCALING_JSON, SCALING_PNG):
    out.log_artifact(client, run_id, KIND, directory / name, "scaling_law")


def _train(
    plan: promotion.PromotionPlan, run_id: str, directory: pathlib.Path,
    key: str, shared_features: ray.ObjectRef, seal: checkpoint_file.Seal,
) -> dict[str, Any]:
  """The reference run on Ray Train; returns rank 0's result and checkpoint."""
  space = plan.outcome.space
  with progress.follow_training(
      MlflowClient(plan.outcome.tracking_uri), run_id, plan.config.privacy.steps,
      space.metric, plan.privacy.scheme.default_accountant):
    return ray_train.fit(
        plan.config, workers=plan.workers, cpus=space.resources.cpu,
        gpus_per_worker=plan.gpus_per_worker,
        storage=directory / TRAIN_FOLDER, key=key,
        tracking_uri=plan.outcome.tracking_uri, run_id=run_id,
        shared_features=shared_features, seal=seal)


def _save_model(
    plan: promotion.PromotionPlan, checkpoint: ray.train.Checkpoint,
    directory: pathlib.Path, privacy: privacy_report_lib.PrivacyReport,
) -> pathlib.Path:
  """The trained weights, raw and EMA, with what produced them."""
  with checkpoint.as_directory() as folder:
    state = checkpoint_file.load(
        pathlib.Path(folder) / checkpoint_file.CHECKPOINT_FILE)
  path = directory / MODEL_FILE
  torch.save({
      "model": state["model"],
      "ema": state["ema"],
      "config": config_io.to_dict(plan.config),
      "privacy": privacy.as_dict(),
  }, path)
  return path
