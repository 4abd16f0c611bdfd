"""A private run's released weights as an MLflow Model that needs no tan_tune.

The model maps the dataset's raw inputs (the float32 tensors its splits
yield: images in [0, 1], C x H x W, or a factory's records) to class
probabilities. Everything in between travels inside it as one `torch.export`
program (`Classifier`): the declared normalisation (public constants, never
computed from the data), any fixed front end the network holds (the
ScatterNet's wavelets), the architecture and the weights the run reports as
its headline (EMA when its metric is `ema_accuracy` or `augtest_accuracy`,
served without AugTest's votes). `pyfunc_program.py`, the loader, is
copied into the model's folder, so mlflow, torch and numpy load and serve
it. A factory's network `torch.export` cannot trace (a rule on the batch
size, say) travels as its factory's code instead (`pyfunc_factory.py`: the
Python files of its package or module, its keyword arguments and the
weights): `check_exportable` finds out when the plan is made, which says
so.

Its signature is a tensor spec of the raw inputs and class probabilities;
its input example is zeros, never an example of any split; its creation
time is the run's start, as everything else a private run publishes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import importlib.metadata
import importlib.util
import json
import logging
import pathlib
import shutil
import sys
import tempfile
import warnings
from typing import Any, Iterator

import mlflow.models
import mlflow.pyfunc
from mlflow.types import schema
import numpy as np
import torch
from torch import nn

from tan_tune.training import datasets
from tan_tune.training import models

# The MLflow Model's folder among the run's artifacts, and its program.
FOLDER = "mlflow_model"
PROGRAM = "program.pt2"
# The loaders, by path: importing one would set MLflow's model-from-code
# here. The second takes a factory's network with its code.
LOADER = pathlib.Path(__file__).with_name("pyfunc_program.py")
FACTORY_LOADER = pathlib.Path(__file__).with_name("pyfunc_factory.py")
# What the run reports as its headline, and the weights that scored it.
EMA_METRICS = ("ema_accuracy", "augtest_accuracy")
# An example batch to trace: two rows, so the batch size stays symbolic.
_TRACE_ROWS = 2


@dataclasses.dataclass(frozen=True)
class Inputs:
  """What the served model takes, all public.

  Attributes:
    shape: one raw input's shape ((C, H, W) for images).
    num_classes: the probabilities it returns per input.
    mean, std: the declared normalisation, per channel (or feature).
  """

  shape: tuple[int, ...]
  num_classes: int
  mean: tuple[float, ...]
  std: tuple[float, ...]

  @classmethod
  def of(cls, data: datasets.Dataset) -> Inputs:
    return cls(tuple(data.input_shape), data.num_classes, tuple(data.mean),
               tuple(data.std))

  def as_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Servable:
  """What a run's MLflow Model will be, known when the run is planned.

  Attributes:
    inputs: what it takes.
    metric: the run's headline metric.
    weights: 'ema' or 'model', those behind `metric`.
    export_failure: why `torch.export` cannot trace a factory's network,
      whose code then travels with the model; None when it can.
  """

  inputs: Inputs
  metric: str
  weights: str
  export_failure: str | None

  @classmethod
  def plan(cls, config: models.ModelConfig, inputs: Inputs, metric: str,
           has_ema: bool) -> Servable:
    """Only a factory's network is exported to check it: the built-in ones
    export (`tests/registry/test_served_model.py`), and a plan stays fast."""
    reason = check_exportable(config, inputs) if config.factory else None
    return cls(inputs, metric, headline_weights(metric, has_ema), reason)

  def as_dict(self) -> dict[str, Any]:
    return {"inputs": self.inputs.as_dict(), "metric": self.metric,
            "weights": self.weights, "export_failure": self.export_failure}

  def describe(self) -> str:
    """What the plan says of it."""
    how = ("as one torch.export program, loadable without tan_tune"
           if self.export_failure is None else
           f"with the factory's code ({self.export_failure})")
    return (f"the {self.weights} weights (those of {self.metric}) with the"
            f" declared normalisation, {how}")


class Classifier(nn.Module):
  """Normalisation, the network and a softmax: raw inputs to probabilities."""

  def __init__(self, network: nn.Module, inputs: Inputs):
    super().__init__()
    self.network = network
    # Per channel for images, else per feature on the last axis.
    shape = (-1, 1, 1) if len(inputs.shape) == 3 else (-1,)
    self.register_buffer("mean", torch.tensor(inputs.mean).view(shape))
    self.register_buffer("std", torch.tensor(inputs.std).view(shape))

  def forward(self, inputs: torch.Tensor) -> torch.Tensor:
    logits = self.network((inputs - self.mean) / self.std)
    return torch.softmax(logits, dim=1)


def headline_weights(metric: str, has_ema: bool) -> str:
  """'ema' or 'model': the weights behind the run's headline `metric`."""
  return "ema" if has_ema and metric in EMA_METRICS else "model"


def network(config: models.ModelConfig, inputs: Inputs,
            state: dict[str, Any], weights: str) -> nn.Module:
  """The trained network of a saved run (`model.pt`'s dict), in eval mode:
  its raw weights, or their EMA (parameters only: buffers are the raw
  model's, as when the run evaluated it)."""
  built = models.build_model(config, inputs.shape, inputs.num_classes)
  built.load_state_dict(state["model"])
  if weights == "ema":
    with torch.no_grad():
      for name, parameter in built.named_parameters():
        parameter.copy_(state["ema"][name])
  return built.eval()


def export(classifier: Classifier,
           inputs: Inputs) -> torch.export.ExportedProgram:
  """The classifier as one program, for any batch size."""
  example = torch.zeros(_TRACE_ROWS, *inputs.shape)
  return torch.export.export(
      classifier.eval(), (example,),
      dynamic_shapes=({0: torch.export.Dim("batch")},))


def check_exportable(config: models.ModelConfig, inputs: Inputs) -> str | None:
  """None when the network exports (checked on a fresh one); else why not,
  for the plan to say."""
  try:
    export(Classifier(models.build_model(config, inputs.shape,
                                         inputs.num_classes), inputs), inputs)
  except Exception as error:  # pylint: disable=broad-except
    return (f"torch.export cannot trace {config.source[1]}:"
            f" {type(error).__name__}")
  return None


def save(folder: pathlib.Path, classifier: Classifier, inputs: Inputs,
         started: float, metadata: dict[str, Any]) -> pathlib.Path:
  """Writes the MLflow Model to `folder`/FOLDER; returns that folder.

  Args:
    started: the run's start, the model's creation time.
    metadata: public facts for its MLmodel file (the privacy card's).
  """
  path = pathlib.Path(folder) / FOLDER
  with tempfile.TemporaryDirectory() as scratch, _saving():
    program = pathlib.Path(scratch) / PROGRAM
    torch.export.save(export(classifier, inputs), program)
    mlflow.pyfunc.save_model(
        path, python_model=str(LOADER),
        artifacts={"program": str(program)},
        **_described(inputs, started, metadata))
  return path


def _described(inputs: Inputs, started: float,
               metadata: dict[str, Any]) -> dict[str, Any]:
  """What each MLflow Model here says of itself: its signature, a zero
  input example, its requirements, and an MLmodel created at the run's
  start holding `metadata`."""
  created = datetime.datetime.fromtimestamp(started, datetime.timezone.utc)
  return {
      "signature": signature(inputs),
      "input_example": np.zeros((1, *inputs.shape), np.float32),
      "pip_requirements": requirements(),
      "mlflow_model": mlflow.models.Model(
          utc_time_created=created.strftime("%Y-%m-%d %H:%M:%S.%f"),
          metadata=metadata)}


def save_weights(folder: pathlib.Path, servable: Servable,
                 config: models.ModelConfig, state: dict[str, Any],
                 started: float, metadata: dict[str, Any]) -> pathlib.Path:
  """The MLflow Model of a saved run's headline weights (`model.pt`'s dict
  `state`): a program (`save`), or the factory's code (`save_factory`)."""
  trained = network(config, servable.inputs, state, servable.weights)
  if servable.export_failure:
    return save_factory(folder, config, trained, servable.inputs, started,
                        metadata)
  return save(folder, Classifier(trained, servable.inputs), servable.inputs,
              started, metadata)


def save_factory(folder: pathlib.Path, config: models.ModelConfig,
                 trained: nn.Module, inputs: Inputs, started: float,
                 metadata: dict[str, Any]) -> pathlib.Path:
  """The MLflow Model of a factory's network: the Python files of its
  package (or its module), its keyword arguments and `trained`'s weights,
  loaded by `pyfunc_factory.py`."""
  path = pathlib.Path(folder) / FOLDER
  with tempfile.TemporaryDirectory() as scratch, _saving():
    scratch = pathlib.Path(scratch)
    torch.save(trained.state_dict(), scratch / "weights.pt")
    (scratch / "factory.json").write_text(json.dumps({
        "factory": config.factory, "kwargs": config.kwargs,
        **inputs.as_dict()}))
    mlflow.pyfunc.save_model(
        path, python_model=str(FACTORY_LOADER),
        artifacts={"weights": str(scratch / "weights.pt"),
                   "factory": str(scratch / "factory.json")},
        code_paths=[str(_python_files(config.factory, scratch / "code"))],
        **_described(inputs, started, metadata))
  return path


def _python_files(factory: str, into: pathlib.Path) -> pathlib.Path:
  """The factory's top-level package (its .py files alone: nothing else of
  the folder it lives in) or module, copied under `into`."""
  top = factory.split(":")[0].split(".")[0]
  spec = importlib.util.find_spec(top)
  if spec.submodule_search_locations:
    package = pathlib.Path(next(iter(spec.submodule_search_locations)))
    for source in package.rglob("*.py"):
      target = into / top / source.relative_to(package)
      target.parent.mkdir(parents=True, exist_ok=True)
      shutil.copyfile(source, target)
    return into / top
  into.mkdir(parents=True)
  return pathlib.Path(shutil.copyfile(spec.origin, into / f"{top}.py"))


@contextlib.contextmanager
def _saving() -> Iterator[None]:
  """While MLflow saves a model: none of its INFO lines, which would print
  the time the run ended (they start with the clock), nor its advice to
  type-hint `predict`, whose signature is given; and no bytecode, since it
  imports the loader (and a factory's code) from the model's folder, which
  would gain a __pycache__ that the release refuses."""
  logger = logging.getLogger("mlflow")
  level, bytecode = logger.level, sys.dont_write_bytecode
  logger.setLevel(logging.WARNING)
  sys.dont_write_bytecode = True
  try:
    with warnings.catch_warnings():
      warnings.filterwarnings("ignore", category=UserWarning, module="mlflow")
      yield
  finally:
    logger.setLevel(level)
    sys.dont_write_bytecode = bytecode


def signature(inputs: Inputs) -> mlflow.models.ModelSignature:
  """Raw float32 inputs of any batch size to [batch, classes] probabilities."""
  return mlflow.models.ModelSignature(
      inputs=schema.Schema([schema.TensorSpec(np.dtype(np.float32),
                                              (-1, *inputs.shape))]),
      outputs=schema.Schema([schema.TensorSpec(np.dtype(np.float32),
                                               (-1, inputs.num_classes))]))


def requirements() -> list[str]:
  """What loading it needs, at the versions that saved it (no local build
  label: a registry has none)."""
  return [f"{name}=={importlib.metadata.version(name).split('+')[0]}"
          for name in ("mlflow", "torch", "numpy")]
