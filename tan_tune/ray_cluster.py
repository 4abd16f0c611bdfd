"""Connecting to Ray: an embedded local instance, or an existing cluster."""

import ray


def connect(address: str | None) -> None:
  """Joins the cluster at `address`, or starts an embedded local Ray.

  Does nothing when Ray is already initialised in this process (tests share
  one instance).
  """
  if ray.is_initialized():
    return
  if address:
    ray.init(address=address)
  else:
    ray.init(include_dashboard=False)
