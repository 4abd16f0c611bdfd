"""A user's own code, named in a config: 'package.module:attribute'.

A search file or trial config names a factory by reference, the way Hydra's
`_target_` does, and every process that builds the run imports it itself:
the driver that validates the search before any trial starts, and each Ray
worker. The reference travels as a string, so nothing is pickled across
processes; the package must be importable where the run trains: installed,
on `PYTHONPATH`, or in the folder the command runs from (which a local Ray's
workers share; on a cluster, install it on the nodes).

Files a factory reads from disk (pretrained weights) are named by their
SHA-256 digest in the plan and on the promoted run, so a run can be traced
to the exact file it started from.
"""

import hashlib
import importlib
import os
import pathlib
import sys
from typing import Any, Callable

import torch
from torch import nn

from tan_tune.errors import ConfigError

FORM = "'package.module:attribute'"
_CHUNK = 1 << 20


def check_reference(field: str, reference: Any) -> None:
  """Raises ConfigError unless `reference` has the form FORM."""
  if (not isinstance(reference, str) or reference.count(":") != 1
      or not all(reference.split(":"))):
    raise ConfigError(field, reference, f"a reference of the form {FORM}")


def check_fields(section: str, name: Any, factory: Any, kwargs: Any) -> None:
  """A config section's source: exactly one of a built-in `name` and a
  `factory`, a well-formed reference, and keyword arguments for a factory
  only.

  Raises:
    ConfigError: naming `section`, '<section>.factory' or '<section>.kwargs'.
  """
  if (name is None) == (factory is None):
    raise ConfigError(
        section, {"name": name, "factory": factory},
        f"exactly one of name (a built-in {section}) and factory (your own:"
        f" {FORM})")
  if factory is not None:
    check_reference(f"{section}.factory", factory)
  if not isinstance(kwargs, dict) or not all(
      isinstance(key, str) for key in kwargs):
    raise ConfigError(f"{section}.kwargs", kwargs,
                      "a mapping of keyword arguments")
  if kwargs and factory is None:
    raise ConfigError(f"{section}.kwargs", kwargs,
                      f"only with {section}.factory; a named {section} takes"
                      " none")


def check_path(field: str, path: Any) -> None:
  """Raises ConfigError unless `path` is None or a string."""
  if path is not None and not isinstance(path, str):
    raise ConfigError(field, path, "a local file path")


def call(field: str, reference: str, kwargs: dict[str, Any]) -> Any:
  """Resolves the factory `reference` and calls it with `kwargs`.

  Raises:
    ConfigError: naming `field`, as `resolve` does, or when the call raises.
  """
  factory = resolve(field, reference)
  section = field.split(".")[0]
  try:
    return factory(**kwargs)
  except Exception as error:  # pylint: disable=broad-except
    raise ConfigError(
        field, reference,
        f"a factory that builds with {section}.kwargs {kwargs}; it raised"
        f" {type(error).__name__}: {error}") from None


def resolve(field: str, reference: str) -> Callable[..., Any]:
  """Imports the module and returns the callable the reference names.

  Raises:
    ConfigError: naming `field`, when the reference is malformed, the module
      does not import, the attribute is missing or is not callable.
  """
  check_reference(field, reference)
  module_name, attribute = reference.split(":")
  # As Ray's local workers do, and `python -m`: the folder the command runs
  # in is importable, after everything installed (never shadowing it).
  if os.getcwd() not in sys.path:
    sys.path.append(os.getcwd())
  try:
    target: Any = importlib.import_module(module_name)
  except Exception as error:  # pylint: disable=broad-except
    # Any failure of the user's module on import, not only a missing one.
    raise ConfigError(
        field, reference,
        f"an importable module (importing {module_name!r} failed:"
        f" {type(error).__name__}: {error}; is its package installed or on"
        " PYTHONPATH where the run trains?)") from None
  for part in attribute.split("."):
    if not hasattr(target, part):
      raise ConfigError(field, reference,
                        f"an attribute of {module_name!r}: it has no {part!r}")
    target = getattr(target, part)
  if not callable(target):
    raise ConfigError(field, reference,
                      f"a callable; it is a {type(target).__name__}")
  return target


def file_digest(field: str, path: str) -> str:
  """The SHA-256 of a local file, hex.

  Raises:
    ConfigError: naming `field`, when the file cannot be read.
  """
  digest = hashlib.sha256()
  try:
    with pathlib.Path(path).expanduser().open("rb") as file:
      while chunk := file.read(_CHUNK):
        digest.update(chunk)
  except OSError as error:
    raise ConfigError(field, path,
                      f"a readable local file ({error.strerror})") from None
  return digest.hexdigest()


def build_model(reference: str, kwargs: dict[str, Any],
                input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
  """Calls the factory `reference` with `kwargs` and checks what it built.

  The checks, each a ConfigError naming 'model.factory': it returns an
  `nn.Module`; it holds no BatchNorm (which mixes the examples of a batch,
  so there is no per-example gradient to clip: GroupNorm is the fix); it
  maps a batch of `input_shape` inputs to [batch, num_classes] logits.
  """
  field = "model.factory"
  model = call(field, reference, kwargs)
  if not isinstance(model, nn.Module):
    raise ConfigError(field, reference,
                      "a callable returning a torch.nn.Module; it returned a"
                      f" {type(model).__name__}")
  for name, module in model.named_modules():
    if isinstance(module, nn.modules.batchnorm._BatchNorm):
      raise ConfigError(
          field, reference,
          f"a model without BatchNorm ({name or 'the model'} is a"
          f" {type(module).__name__}): BatchNorm normalises with statistics"
          " of the whole batch, so no per-example gradient exists to clip;"
          " put nn.GroupNorm(groups, channels) in its place")
  _check_logits(model, reference, input_shape, num_classes)
  return model


def _check_logits(model: nn.Module, reference: str,
                  input_shape: tuple[int, ...], num_classes: int) -> None:
  """One batch of two zero inputs must give [2, num_classes] logits."""
  shape = ", ".join(map(str, input_shape))
  with torch.no_grad(), torch.random.fork_rng(devices=[]):
    try:
      logits = model(torch.zeros(2, *input_shape))
    except Exception as error:  # pylint: disable=broad-except
      raise ConfigError(
          "model.factory", reference,
          f"a model taking inputs of shape [batch, {shape}]; it raised"
          f" {type(error).__name__}: {error}") from None
  if not isinstance(logits, torch.Tensor) or tuple(logits.shape) != (
      2, num_classes):
    got = (list(logits.shape) if isinstance(logits, torch.Tensor)
           else type(logits).__name__)
    raise ConfigError(
        "model.factory", reference,
        f"a model returning [batch, {num_classes}] logits (the dataset has"
        f" {num_classes} classes); for [2, {shape}] inputs it returned {got}")


def load_weights(model: nn.Module, path: str) -> None:
  """Loads a state dict saved with `torch.save(model.state_dict(), path)`.

  Raises:
    ConfigError: naming 'model.weights', when the file is unreadable, holds
      no state dict, or does not fit the model.
  """
  field = "model.weights"
  try:
    state = torch.load(pathlib.Path(path).expanduser(), map_location="cpu",
                       weights_only=True)
  except OSError as error:
    raise ConfigError(field, path,
                      f"a readable local file ({error.strerror})") from None
  except Exception as error:  # pylint: disable=broad-except
    raise ConfigError(
        field, path, f"a file written by torch.save(model.state_dict()); it"
        f" did not load: {type(error).__name__}: {error}") from None
  if not isinstance(state, dict):
    raise ConfigError(field, path,
                      f"a state dict; it holds a {type(state).__name__}")
  try:
    model.load_state_dict(state)
  except RuntimeError as error:
    first = str(error).strip().splitlines()
    raise ConfigError(field, path,
                      "the state dict of this model; loading it failed: "
                      + " ".join(line.strip() for line in first[:3])) from None
