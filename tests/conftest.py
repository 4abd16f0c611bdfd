"""Shared fixtures: one local Ray per test session (a cold start costs ~5 s)."""

import os

import pytest

# Token auth is Ray 2.60's default for a new local cluster; tests need none.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


@pytest.fixture(scope="session")
def local_ray():
  import ray  # pylint: disable=g-import-not-at-top

  ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
  yield
  ray.shutdown()
