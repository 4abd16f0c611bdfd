"""Connecting to Ray: an embedded local instance, or an existing cluster.

An address comes from `--address` or, failing that, from `RAY_ADDRESS` (what
`ray job submit` and KubeRay's RayJob set). A named cluster must answer: Ray
itself would wait minutes on a wrong address, and with no address at all it
would start a fresh local cluster, which on a cluster's head node silently
leaves every GPU worker idle. So the address is probed first and a wrong one
is a clear error, never a silent new local cluster.
"""

import os
import socket

import ray

from tan_tune.errors import ConfigError

_PROBE_SECONDS = 5.0
_DEFAULT_PORT = 6379  # `ray start --head`'s GCS port.


def resolve_address(address: str | None) -> tuple[str | None, str]:
  """The address to join and where it came from ('--address', 'RAY_ADDRESS').

  None means: start an embedded local Ray.
  """
  if address:
    return address, "--address"
  from_env = os.environ.get("RAY_ADDRESS")
  if from_env:
    return from_env, "RAY_ADDRESS"
  return None, "--address"


def _host_port(address: str) -> tuple[str, int]:
  """'ray://host:port', 'host:port' or 'host' as (host, port)."""
  bare = address.split("://", 1)[-1]
  host, _, port = bare.rpartition(":")
  if not host:
    return port, _DEFAULT_PORT
  return host, int(port)


def probe(address: str, field: str = "--address") -> None:
  """Raises ConfigError unless something listens at `address`.

  'auto' (the cluster this machine is part of) is left to Ray, which fails
  at once when there is none.
  """
  if address == "auto":
    return
  try:
    host, port = _host_port(address)
  except ValueError:
    raise ConfigError(field, address,
                      "host:port of a Ray cluster's head (e.g."
                      " 10.0.0.5:6379), ray://host:10001, or 'auto'") from None
  try:
    with socket.create_connection((host, port), timeout=_PROBE_SECONDS):
      pass
  except OSError as error:
    raise ConfigError(
        field, address,
        f"the address of a running Ray cluster; nothing answers at"
        f" {host}:{port} ({error.strerror or error}). Start one with `ray"
        " start --head`, or fix the address") from None


# Whether `connect` started (or joined) the Ray this process holds.
_connected_here = False


def resolve_and_probe(address: str | None) -> tuple[str | None, str]:
  """`resolve_address`, and a probe of the address when one is given (None:
  an embedded Ray will start).

  Raises:
    ConfigError: no Ray cluster answers there.
  """
  address, field = resolve_address(address)
  if address is not None:
    probe(address, field)
  return address, field


def connect(address: str | None, temp_dir: str | None = None) -> None:
  """Joins the cluster at `address` (or RAY_ADDRESS), or starts a local Ray
  whose session folder lives in `temp_dir` (default: Ray's, /tmp/ray).

  A named address is probed even when Ray is already initialised in this
  process (as in tests, which share one), so a wrong one always fails.

  Raises:
    ConfigError: an address was given and no Ray cluster answers there.
  """
  address, field = resolve_and_probe(address)
  if ray.is_initialized():
    return
  global _connected_here
  _connected_here = True
  if address is None:
    ray.init(address="local", include_dashboard=False, _temp_dir=temp_dir)
    return
  try:
    ray.init(address=address)
  except ConnectionError as error:
    raise ConfigError(
        field, address,
        f"the address of a running Ray cluster; Ray could not join it"
        f" ({error}). Start one with `ray start --head`, or fix the"
        " address") from None


def disconnect() -> None:
  """Leaves the cluster `connect` joined (stopping a local Ray it started),
  so that Ray's last worker lines reach the command's log, not the terminal
  after it. A Ray this process had started before (tests) stays."""
  global _connected_here
  if _connected_here:
    ray.shutdown()
    _connected_here = False
