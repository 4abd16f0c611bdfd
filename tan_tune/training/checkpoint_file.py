"""A run's checkpoint file: written whole and owner-only, read on the CPU.

In a private run the checkpoint holds the secret generator states (the
sampler's, the noise's, dropout's) and the augmentation key, so it is
written 0600 and atomically (a crash never leaves half a file), and a
finished run's is rewritten without them (`strip_generator_states`): its
weights stay, and resumed it only reports.
"""

import os
import pathlib
from typing import Any

import torch

CHECKPOINT_FILE = "checkpoint.pt"
# What a checkpoint names its generator states and augment key (secrets).
GENERATOR_SUFFIX = "_rng"


def write(path: pathlib.Path, state: dict[str, Any]) -> None:
  """Saves `state` to `path` owner-only, replacing it in one step."""
  path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
  partial = path.with_name(path.name + ".partial")
  descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
  with os.fdopen(descriptor, "wb") as file:
    torch.save(state, file)
  os.replace(partial, path)


def read(path: pathlib.Path) -> dict[str, Any]:
  """The state at `path`, on the CPU: generator states must be CPU tensors
  whatever the device; loading a state dict moves weights to theirs."""
  return torch.load(path, map_location="cpu", weights_only=False)


def charge_of(path: pathlib.Path) -> str | None:
  """The ledger charge of the run that wrote the checkpoint, if any."""
  return read(path).get("charge")


def strip_generator_states(path: pathlib.Path) -> None:
  """Rewrites a finished run's checkpoint without its generator states and
  augmentation key."""
  state = read(path)
  write(path, {key: value for key, value in state.items()
               if not key.endswith(GENERATOR_SUFFIX)})
