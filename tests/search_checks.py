"""What a finished simulated search leaves in MLflow, checked alike by the
end-to-end searches (test_search.py) and the killed and resumed search of
a team's own callables (test_entry_points.py)."""

from mlflow import MlflowClient

from tan_tune import mlflow_store
from tan_tune.search import tracking


def check_mlflow(tracking_uri, name, parent_run_id, trials, batch_size=64,
                 reference_batch_size=512):
  """A search parent run and `trials` finished nested runs, one a trial,
  each simulated at `batch_size` and evaluated at steps 10 and 20."""
  client = MlflowClient(tracking_uri)
  experiment = client.get_experiment_by_name(name)
  runs = client.search_runs([experiment.experiment_id])
  [parent] = [r for r in runs if r.info.run_id == parent_run_id]
  assert parent.data.tags[mlflow_store.KIND_TAG] == "search"
  assert parent.data.params["reference.batch_size"] == str(
      reference_batch_size)
  assert "reference_epsilon_rdp" in parent.data.metrics
  assert "not private" in parent.data.tags["tan_tune.note"]
  children = [r for r in runs if r.data.tags.get(mlflow_store.PARENT_TAG)
              == parent_run_id]
  assert len(children) == trials
  assert len({c.data.tags[tracking.TRIAL_ID_TAG] for c in children}) == trials
  for child in children:
    assert child.info.status == "FINISHED"
    assert child.data.tags[mlflow_store.STATUS_TAG] == "finished"
    assert child.data.tags["tan_tune.private"] == "false"
    assert float(child.data.params["hyperparameters.lr"]) > 0
    assert child.data.params["simulated.batch_size"] == str(batch_size)
    for metric in ("accuracy", "ema_accuracy", "epsilon",
                   "reference_epsilon", "train_loss"):
      assert metric in child.data.metrics
    history = client.get_metric_history(child.info.run_id, "accuracy")
    assert {m.step for m in history} == {10, 20}
  return children
