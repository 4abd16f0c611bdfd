"""What `--smoke` shares between the benchmarks.

A search file shrunk to one trial of 4 steps: enough for a search, and the
promotion or audit after it, to go through every path a benchmark times, in
seconds of training. And a local Ray that a script's flows share under
`--smoke` instead of starting one each: a start costs seconds of CPU, and a
smoke run's timings are no figures.
"""

import contextlib
import os
import pathlib
import tempfile
from typing import Any, Iterator

import ray
import yaml


def shrink(space: dict[str, Any]) -> dict[str, Any]:
  """`space` with one trial of 4 steps, evaluated every 2."""
  return {**space, "num_trials": 1, "eval_every": 2,
          "reference": {**space["reference"], "steps": 4}}


def shrunken_copy(path: pathlib.Path, folder: pathlib.Path) -> pathlib.Path:
  """The search file at `path`, shrunk, written into `folder`."""
  copy = folder / path.name
  copy.write_text(yaml.safe_dump(shrink(yaml.safe_load(path.read_text()))))
  return copy


@contextlib.contextmanager
def local_ray(wanted: bool, **resources: Any) -> Iterator[None]:
  """A local Ray for the block when `wanted`; flows in it join it instead of
  starting their own (`--smoke`: one start per script, not one per flow).

  Its session folder lies in an owner-only one, as a private run's own
  Ray's does, so that private runs may join it too.
  """
  if not wanted:
    yield
    return
  with tempfile.TemporaryDirectory(prefix="ray_smoke_") as parent:
    ray.init(address="local", include_dashboard=False, log_to_driver=False,
             _temp_dir=os.path.join(parent, "ray"), **resources)
    try:
      yield
    finally:
      ray.shutdown()
