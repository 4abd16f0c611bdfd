"""A promoted run's MLflow record written by hand, as `promote/run.py` logs
it (through its release), for the card and registry tests; and a private
random search's, as the search driver logs it before its first trial."""

import dataclasses

from mlflow import MlflowClient

from tan_tune import config_io
from tan_tune.privacy import report as report_lib
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.privacy import trial_count
from tan_tune.privacy import tuning
from tan_tune.registry import served_model
from tan_tune.release import release
from tan_tune.search import modes
from tan_tune.training import datasets
from tan_tune.training import models
from tan_tune.training import trial_config

KIND = "promoted"
# The digits demo's reference run.
TRIPLET = triplet_lib.PrivacyTriplet(1437, 512, 3.9182, 40)
INPUTS = served_model.Inputs((1, 8, 8), 10, (0.5,), (0.5,))


def config(sigma: float = TRIPLET.noise_multiplier) -> trial_config.TrialConfig:
  return trial_config.TrialConfig(
      dataset=datasets.DatasetConfig(name="digits"),
      model=models.ModelConfig(name="small-cnn"),
      privacy=trial_config.PrivacyConfig(batch_size=TRIPLET.batch_size,
                                         noise_multiplier=sigma,
                                         steps=TRIPLET.steps))


def log_run(client: MlflowClient, experiment: str,
            sigma: float = TRIPLET.noise_multiplier,
            accuracy: float = 0.95) -> str:
  """A finished promoted run at `sigma`; its id."""
  triplet = triplet_lib.PrivacyTriplet(TRIPLET.dataset_size,
                                       TRIPLET.batch_size, sigma,
                                       TRIPLET.steps)
  report = report_lib.privacy_report(triplet)
  out = release.Release()
  run_id = out.create_run(client, experiment, KIND, "promote-t0", {
      "tan_tune.private": "true", "tan_tune.status": "finished",
      "tan_tune.tuning_privacy": modes.SimulatedSearch.name,
      "tan_tune.clipping": "fast", "tan_tune.package_version": "0.1.0",
      "tan_tune.git_commit": "0123abcd"})
  out.log_params(client, run_id, KIND, {
      "privacy": report.as_dict(),
      "reference_run": config_io.to_dict(config(sigma)),
      "tuning_privacy": modes.SimulatedSearch.name,
      "tuning_guarantee": modes.SimulatedSearch.guarantee,
      "ledger": {"total_epsilon": report.epsilon.epsilon + 1.0,
                 "budget": 8.0, "accountant": "rdp (composed)",
                 "delta": report.delta},
      "model_weights_sha256": None,
      "served_model": served_model.Servable(INPUTS, "ema_accuracy", "ema",
                                            None).as_dict()})
  out.log_metrics(client, run_id, KIND, {"ema_accuracy": accuracy,
                                         "accuracy": accuracy - 0.01})
  out.end_run(client, run_id)
  return run_id


def log_search_run(client: MlflowClient, experiment: str) -> str:
  """A private random search of the demo's triplet, K ~ geometric of mean
  1.5, as its run stands when the search registers it; its id."""
  report = report_lib.privacy_report(TRIPLET)
  count = trial_count.TrialCount("geometric", 1.5)
  epsilon = tuning.search_epsilon(TRIPLET, report.delta, count)
  out = release.Release()
  run_id = out.create_run(client, experiment, "search", "search-s", {
      "tan_tune.tuning_privacy": tuning.PRIVATE_RANDOM_SEARCH,
      "tan_tune.package_version": "0.1.0", "tan_tune.git_commit": "0123abcd"})
  out.log_params(client, run_id, "search", {
      "reference": {**report.as_dict(), "clip_norm": 1.0, "clipping": "auto"},
      "tuning_privacy": tuning.PRIVATE_RANDOM_SEARCH,
      # Ranked on the test split: no score in the trial's eps.
      "select_on": "test", "validation_fraction": 0, "score_noise": None,
      "search_epsilon": {**dataclasses.asdict(epsilon),
                         "describe": epsilon.describe()},
      "trial_count": dataclasses.asdict(count),
      "served_model": {"inputs": INPUTS.as_dict(), "metric": "ema_accuracy",
                       "weights": "ema"},
      "model_weights_sha256": None,
      "ledger": {"total_epsilon": epsilon.epsilon, "budget": 4.0,
                 "accountant": "rdp (composed)"}})
  return run_id
