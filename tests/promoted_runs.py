"""What the end-to-end promotion tests read back from MLflow."""

import re

from mlflow import MlflowClient

from tan_tune import mlflow_store
from tan_tune.promote import run as promote

# What a private run may publish: DP outputs, their accounting and the plan.
PRIVATE_RUN_METRICS = re.compile(
    r"(step|accuracy|ema_accuracy|augtest_accuracy|epsilon"
    r"|(planned|final)_epsilon_(rdp|prv|pld|pld-jl)|final_eps_tan"
    r"|predicted_(ema_accuracy|low|high)|prediction_error)")


def promoted(uri, experiment="promote", trial_id=None):
  """The finished promoted run of `experiment` (of its trial `trial_id` when
  several were promoted): (client, run)."""
  client = MlflowClient(uri)
  trial = (f" and tags.`{promote.SOURCE_TRIAL_TAG}` = '{trial_id}'"
           if trial_id else "")
  [run] = client.search_runs(
      [client.get_experiment_by_name(experiment).experiment_id],
      filter_string=f"tags.`{mlflow_store.KIND_TAG}` = 'promoted' and"
      f" tags.`{mlflow_store.STATUS_TAG}` = 'finished'{trial}")
  return client, run
