"""The ledger's order: which of several charges at one moment came first.

Runs charging one dataset at once each reserve an entry, then check the
dataset's composition again. Checked against every entry found, two that
both fit alone both refuse; checked against entries by start time, both
may run, since a client's clock orders nothing. The ledger therefore takes
each entry's place in an order the store assigns as it commits: the
versions of one registered model, `ORDER_MODEL`, each created with the
entry's run id. MLflow numbers a model's versions max + 1 inside the
store's transaction and retries when two collide, so whoever holds version
v reads every version below it, committed. Every reader then applies one
rule to one list (`ledger.py`): an entry counts iff it fits with those
counted before it. The charge at v decides for itself what every later
reader will decide for it; its run trains only if it counts.

Once placed, an entry also keeps its place as its param `sequence`
("<the order's creation time, ms>:<version>"), which MLflow never changes:
if the registered model is deleted or renamed, a new one starts a new
order, and the entries of the old one keep their places before it.
"""

import dataclasses
import random
import time

from mlflow import MlflowClient
from mlflow.entities import Run
from mlflow.exceptions import MlflowException

ORDER_MODEL = "tan_tune-privacy-ledger-order"
SEQUENCE_PARAM = "sequence"
_DESCRIPTION = (
    "The order of tan_tune's privacy-ledger charges (one version per"
    " charge, in the order the store committed them); not a model. Deleting"
    " it or its versions refunds nothing.")
# MLflow retries a colliding version 3 times; several charges at once can
# collide more often than that.
_TRIES = 20


@dataclasses.dataclass(frozen=True, order=True)
class Place:
  """An entry's place: the order (its model's creation time) and version."""

  order: int
  version: int

  def text(self) -> str:
    return f"{self.order}:{self.version}"

  @classmethod
  def parse(cls, text: str) -> "Place":
    order, version = text.split(":")
    return cls(int(order), int(version))


def current_order(client: MlflowClient) -> int | None:
  """The creation time of the order model in use; None before any charge."""
  try:
    return client.get_registered_model(ORDER_MODEL).creation_timestamp
  except MlflowException as error:
    if error.error_code != "RESOURCE_DOES_NOT_EXIST":
      raise
    return None


def places(client: MlflowClient) -> tuple[int | None, dict[str, Place]]:
  """The current order (`current_order`) and the place of every entry it
  holds, by run id."""
  order = current_order(client)
  if order is None:
    return None, {}
  found: dict[str, Place] = {}
  for version in client.search_model_versions(f"name = '{ORDER_MODEL}'",
                                               max_results=200_000):
    place = Place(order, int(version.version))
    found[version.run_id] = min(place, found.get(version.run_id, place))
  return order, found


def take_place(client: MlflowClient, run: Run) -> Place:
  """The entry's place in the current order, taking one if it has none."""
  run_id = run.info.run_id
  placed = places(client)[1].get(run_id)
  if placed:
    return placed
  for _ in range(_TRIES - 1):
    try:
      return _new_place(client, run)
    except MlflowException:
      time.sleep(random.uniform(0.05, 0.5))  # Lost a collision: again.
  return _new_place(client, run)


def _new_place(client: MlflowClient, run: Run) -> Place:
  _ensure_model(client)
  # Ready at once (no files): MLflow's wait would only log a line.
  client.create_model_version(ORDER_MODEL, run.info.artifact_uri,
                              run_id=run.info.run_id, await_creation_for=0)
  return places(client)[1][run.info.run_id]


def _ensure_model(client: MlflowClient) -> None:
  """Creates the order model unless it exists: its name is unique, so of
  two first charges at once one creates it and the other uses it."""
  if current_order(client) is not None:
    return
  try:
    client.create_registered_model(ORDER_MODEL, description=_DESCRIPTION)
  except MlflowException as error:
    if error.error_code != "RESOURCE_ALREADY_EXISTS":
      raise
