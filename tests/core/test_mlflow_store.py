"""The MLflow adapter: where to look at runs, and the login workers use."""

from tan_tune import mlflow_store


def test_a_server_is_viewed_on_its_own_page_a_local_store_through_mlflow_ui():
  assert mlflow_store.how_to_view("http://mlflow:5000/", "7") == (
      "http://mlflow:5000/#/experiments/7?workflowType=machine_learning")
  local = mlflow_store.how_to_view("sqlite:////x/mlflow.db", "7")
  assert local.startswith("mlflow ui --backend-store-uri sqlite:////x/")
  assert local.endswith(mlflow_store.ui_url("7"))


def test_the_login_handed_to_workers_is_mlflows_variables_that_are_set(
    monkeypatch):
  for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD",
               "MLFLOW_TRACKING_TOKEN"):
    monkeypatch.delenv(name, raising=False)
  assert mlflow_store.login() == {}
  monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "alice")
  monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "secret")
  assert mlflow_store.login() == {"MLFLOW_TRACKING_USERNAME": "alice",
                                  "MLFLOW_TRACKING_PASSWORD": "secret"}
