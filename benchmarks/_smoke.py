"""What `--smoke` makes of a search file: one trial of 4 steps.

Enough for a search, and the promotion or audit after it, to go through
every path a benchmark times, in seconds of training.
"""

import pathlib
from typing import Any

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
