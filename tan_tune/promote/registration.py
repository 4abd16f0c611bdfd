"""The promoted run's model as it leaves: MLflow Model, privacy card, version.

`register` runs when the promoted run has just been created, before any
calibration or training: the registry dates a new version and no client can
set that date (`model_registry.py`), so it is made while it can only tell
the run's start. Its description and tags are the privacy card, built from
what the run has published by then (its plan, params and tags; every figure
of the card is fixed by the plan). `publish` runs when the weights are
saved: the MLflow Model of the headline weights (`served_model.py`) and the
card as `privacy_card.json` and `.md`, through the run's release. `finish`
marks the version finished (alias `candidate`) or failed: tags and aliases
carry no time.
"""

import pathlib
import tempfile

from mlflow import MlflowClient
import torch

from tan_tune.registry import model_registry
from tan_tune.registry import privacy_card
from tan_tune.registry import served_model
from tan_tune.release import release as release_lib
from tan_tune.training import models

KIND = "promoted"


def card(client: MlflowClient, run_id: str) -> privacy_card.PrivacyCard:
  """The run's privacy card from its published record, with an audit of its
  configuration if the store holds one."""
  run = client.get_run(run_id)
  return privacy_card.build(privacy_card.Published(run, KIND),
                            model_registry.audit_figure(client,
                                                        run.data.params))


def register(client: MlflowClient, run_id: str,
             name: str | None) -> str | None:
  """The run's version of `name` (a resumed run finds its own); None when
  not registering."""
  if name is None:
    return None
  return model_registry.register(client, name, run_id, card(client, run_id))


def publish(client: MlflowClient, run_id: str, served: served_model.Servable,
            config: models.ModelConfig, model_path: pathlib.Path,
            out: release_lib.Release) -> None:
  """The card's files and the MLflow Model of the headline weights
  (`model_path`, of a network built by `config`), on the run."""
  found = card(client, run_id)
  found.log(out, client, run_id, KIND)
  with tempfile.TemporaryDirectory() as folder:
    out.log_folder(client, run_id, KIND, served_model.save_weights(
        pathlib.Path(folder), served, config,
        torch.load(model_path, map_location="cpu", weights_only=False),
        out.started, {"privacy_card": found.tags()}))


def finish(client: MlflowClient, name: str | None, version: str | None,
           finished: bool) -> None:
  """The version's status, and `candidate` when the run finished."""
  if name and version:
    model_registry.finish(client, name, version, finished)
