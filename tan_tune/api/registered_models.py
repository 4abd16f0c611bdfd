"""The Model Registry of private models as Python functions.

`registry` lists a registered model's versions with each one's eps, delta,
accountant, test accuracy and audit figure; `champion` moves the alias
`champion` onto a version that has a privacy card and eps within a limit;
`card` is a version's privacy card.
`tan-tune registry` parses its arguments, calls them and prints the result.
Both raise `RegistryRefused`, one line saying why, for an unknown store,
model or version, a version without a card or a trained model, or eps over
the limit.
"""

from mlflow import MlflowClient

from tan_tune import mlflow_store
from tan_tune.registry import model_registry
# Re-exported as the API's own, so that its reference renders the classes.
from tan_tune.registry.model_registry import RegistryRefused, VersionRow


def registry(name: str, *,
             tracking_uri: str = mlflow_store.DEFAULT_TRACKING_URI
             ) -> list[VersionRow]:
  """The versions of registered model `name`, newest first.

  Args:
    name: the registered model's name.
    tracking_uri: the MLflow store that holds its registry.

  Raises:
    RegistryRefused: no store at `tracking_uri`, or no model `name`.
  """
  return model_registry.versions(_client(tracking_uri), name)


def champion(name: str, version: str, max_epsilon: float, *,
             tracking_uri: str = mlflow_store.DEFAULT_TRACKING_URI
             ) -> VersionRow:
  """Moves `champion` onto `version` of `name`; the version as it is now.

  Args:
    name: the registered model's name.
    version: the version's number, as text ('3').
    max_epsilon: the most eps the version's privacy card may state.
    tracking_uri: the MLflow store that holds its registry.

  Raises:
    RegistryRefused: no store at `tracking_uri`; an unknown model or
      version; a version without a card or a trained model; eps over
      `max_epsilon`.
  """
  return model_registry.move_champion(_client(tracking_uri), name, version,
                                      max_epsilon)


def card(name: str, version: str, *,
         tracking_uri: str = mlflow_store.DEFAULT_TRACKING_URI) -> str:
  """The privacy card of `version` of `name`, in Markdown.

  Args:
    name: the registered model's name.
    version: the version's number, as text ('3').
    tracking_uri: the MLflow store that holds its registry.

  Raises:
    RegistryRefused: no store at `tracking_uri`; an unknown model or
      version, or one without a card.
  """
  return model_registry.card_text(_client(tracking_uri), name, version)


def _client(tracking_uri: str) -> MlflowClient:
  """A client of an existing store: reading a sqlite file that is not there
  would create it."""
  if not mlflow_store.store_exists(tracking_uri):
    raise RegistryRefused(f"no MLflow store at {tracking_uri}")
  uri = mlflow_store.absolute_uri(tracking_uri)
  return MlflowClient(uri, registry_uri=uri)
