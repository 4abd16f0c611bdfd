"""A run's checkpoint file: written whole and owner-only, read on the CPU.

In a private run the checkpoint holds the secret generator states (the
sampler's, the noise's, dropout's) and the augmentation key, so it is
written 0600 and atomically (a crash never leaves half a file), and a
finished run's is rewritten without them (`strip_generator_states`): its
weights stay, and resumed it only reports.

A private run's checkpoint is sealed, so that nobody can forge one (step 0
and fresh generator states would train again on one charge) or hand one
attempt's state to another:

    file = MAGIC || len(h) || h || tag || payload,
    tag  = HMAC-SHA256(k_a, h || payload),

h the header (JSON: the charge, the step and the configuration it was
charged for), payload the pickled state, and k_a the attempt's key, which
the ledger derives from its secret key (`ledger/custody.py`). The
tag is checked before a byte of the payload is unpickled; the header may be
read without the key (`header`), to find which attempt's key to check with.
"""

import dataclasses
import hashlib
import hmac
import io
import json
import os
import pathlib
from typing import Any

import torch

CHECKPOINT_FILE = "checkpoint.pt"
# What a checkpoint names its generator states and augment key (secrets).
GENERATOR_SUFFIX = "_rng"
MAGIC = b"tan_tune sealed checkpoint 1\n"
_LENGTH_BYTES = 4
_TAG_BYTES = hashlib.sha256().digest_size


class CheckpointRefused(ValueError):
  """A checkpoint that is not the sealed state of the run asking for it."""


@dataclasses.dataclass(frozen=True)
class Seal:
  """How a private run seals its checkpoints.

  Attributes:
    charge: the ledger entry (attempt) paying for the run.
    key: k_a, the attempt's checkpoint key.
    config: the configuration the charge paid for (`trial_config.charged`).
  """

  charge: str
  key: bytes = dataclasses.field(repr=False)
  config: dict[str, Any] = dataclasses.field(default_factory=dict)

  def part(self, name: str, config: dict[str, Any]) -> "Seal":
    """The seal of one part of the run (a private search's trial `name`,
    which trains `config`): its own key, so that no part opens another's
    checkpoints."""
    return Seal(f"{self.charge}/{name}", self.derive(name), config)

  def derive(self, name: str) -> bytes:
    """HMAC-SHA256(k, name): a key of the run's for `name`, as secret as
    k and independent of every other name's."""
    return hmac.new(self.key, name.encode(), hashlib.sha256).digest()


def write(path: pathlib.Path, state: dict[str, Any],
          seal: Seal | None = None) -> None:
  """Saves `state` to `path` owner-only, replacing it in one step; sealed
  under `seal` when given."""
  buffer = io.BytesIO()
  torch.save(state, buffer)
  payload = buffer.getvalue()
  if seal:
    header = json.dumps({"charge": seal.charge, "step": state["step"],
                         "config": seal.config}, sort_keys=True).encode()
    payload = b"".join([MAGIC, len(header).to_bytes(_LENGTH_BYTES, "big"),
                        header, _tag(seal.key, header, payload), payload])
  path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
  partial = path.with_name(path.name + ".partial")
  descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
  with os.fdopen(descriptor, "wb") as file:
    file.write(payload)
  os.replace(partial, path)


def header(path: pathlib.Path) -> dict[str, Any] | None:
  """A sealed checkpoint's header, unchecked (to find its attempt's key);
  None for an unsealed one."""
  parts = _split(pathlib.Path(path).read_bytes())
  return json.loads(parts[0]) if parts else None


def read(path: pathlib.Path, seal: Seal | None = None) -> dict[str, Any]:
  """The state at `path`, on the CPU: generator states must be CPU tensors
  whatever the device; loading a state dict moves weights to theirs.

  Raises:
    CheckpointRefused: with `seal`, the file is not sealed under its key
      (forged, edited, another attempt's, or unsealed); without, the file is
      sealed (a private run's, which only its run may open).
  """
  content = pathlib.Path(path).read_bytes()
  if seal:
    return _unpickled(_opened(path, content, seal)[1])
  if _split(content):
    raise CheckpointRefused(f"{path} is a private run's sealed checkpoint")
  return _unpickled(content)


def load(path: str | os.PathLike) -> dict[str, Any]:
  """A checkpoint's state as its owner reads it (a finished run's weights),
  sealed or not, on the CPU: reading trains nothing, so the seal is left
  unchecked; a run resuming it checks it (`read`).

  Args:
    path: the checkpoint file (`checkpoint.pt` in a run's checkpoint
      folder).
  """
  content = pathlib.Path(path).read_bytes()
  parts = _split(content)
  return _unpickled(parts[2] if parts else content)


def verified_header(path: pathlib.Path, seal: Seal) -> dict[str, Any]:
  """The header of a checkpoint sealed under `seal`, its tag checked and
  nothing unpickled.

  Raises:
    CheckpointRefused: as `read`.
  """
  head, _ = _opened(path, pathlib.Path(path).read_bytes(), seal)
  return json.loads(head)


def _opened(path: pathlib.Path, content: bytes,
            seal: Seal) -> tuple[bytes, bytes]:
  """The header and payload of a checkpoint sealed under `seal`, its tag
  checked."""
  why = f"{path} is not a checkpoint sealed for charge {seal.charge}"
  parts = _split(content)
  if parts is None:
    raise CheckpointRefused(f"{why}: it has no seal")
  head, tag, payload = parts
  if not hmac.compare_digest(tag, _tag(seal.key, head, payload)):
    raise CheckpointRefused(f"{why}: its seal does not match (edited,"
                            " forged, or another attempt's)")
  return head, payload


def _split(content: bytes) -> tuple[bytes, bytes, bytes] | None:
  """A sealed file's header, tag and payload; None for an unsealed one."""
  if not content.startswith(MAGIC):
    return None
  start = len(MAGIC) + _LENGTH_BYTES
  end = start + int.from_bytes(content[len(MAGIC):start], "big")
  return (content[start:end], content[end:end + _TAG_BYTES],
          content[end + _TAG_BYTES:])


def _unpickled(payload: bytes) -> dict[str, Any]:
  return torch.load(io.BytesIO(payload), map_location="cpu",
                    weights_only=False)


def _tag(key: bytes, head: bytes, payload: bytes) -> bytes:
  # The header's length first: no split of header || payload forges another.
  message = hmac.new(key, len(head).to_bytes(_LENGTH_BYTES, "big"),
                     hashlib.sha256)
  message.update(head)
  message.update(payload)
  return message.digest()


def strip_generator_states(path: pathlib.Path,
                           seal: Seal | None = None) -> None:
  """Rewrites a finished run's checkpoint without its generator states and
  augmentation key (sealed again under `seal`)."""
  state = read(path, seal)
  write(path, {key: value for key, value in state.items()
               if not key.endswith(GENERATOR_SUFFIX)}, seal)
