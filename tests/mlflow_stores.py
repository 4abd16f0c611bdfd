"""A new MLflow sqlite store in milliseconds: creating one runs MLflow's
schema migrations (seconds each time), so each test process runs them once,
on a template, and every new store is a copy of it: the same file MLflow
would have made."""

import atexit
import functools
import logging
import pathlib
import shutil
import tempfile


@functools.cache
def _template() -> pathlib.Path:
  from mlflow import MlflowClient  # pylint: disable=g-import-not-at-top

  folder = pathlib.Path(tempfile.mkdtemp(prefix="mlflow_template_"))
  atexit.register(shutil.rmtree, folder, True)
  path = folder / "mlflow.db"
  # Quietly: a test reading what its command printed may make the template.
  logging.disable(logging.INFO)
  try:
    MlflowClient(f"sqlite:///{path}").search_experiments()
  finally:
    logging.disable(logging.NOTSET)
  return path


def new_store(folder: pathlib.Path, name: str = "mlflow.db") -> str:
  """`folder/name` as MLflow creates a new store; its URI."""
  path = pathlib.Path(folder) / name
  shutil.copyfile(_template(), path)
  return f"sqlite:///{path}"


def store(folder: pathlib.Path, name: str = "mlflow.db") -> str:
  """The URI of `folder/name`, made as `new_store` makes one if it is not
  there yet: for tests that name their store in several places."""
  path = pathlib.Path(folder) / name
  if not path.exists():
    return new_store(folder, name)
  return f"sqlite:///{path}"
