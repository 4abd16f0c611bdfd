"""Search files for the tests of `search/space.py`, `search/trials.py` and
`search/trial_record.py`:
the shipped ones, a valid base on digits to change field by field, and
trials drawn from a space."""

import copy
import pathlib
from typing import Any

import optuna
import yaml

from tan_tune.search import resolved as resolved_lib
from tan_tune.search import space as search_space
from tan_tune.search import trial_record
from tan_tune.search import trials

SPACES = pathlib.Path(__file__).resolve().parent.parent / "search_spaces"
SHIPPED = ("digits-demo", "digits-private", "fashion-mnist-cnn",
           "fashion-mnist-frontier", "fashion-mnist-eps3", "fashion-mnist-eps2",
           "fashion-mnist-eps1",
           "fashion-mnist-private", "mnist-eps3", "cifar10-wrn16-4",
           "imagenet-nfresnet50")
DIGITS_N = 1437
FASHION_MNIST_N = 60_000
CIFAR10_N = 50_000
IMAGENET_N = 1_281_167
DELETE = object()  # A value of `load` that removes the field.

optuna.logging.set_verbosity(optuna.logging.WARNING)


def shipped(name: str) -> search_space.SearchSpace:
  return search_space.load_search_space(SPACES / f"{name}.yaml")


def base() -> dict[str, Any]:
  """A valid space on digits that every malformed file starts from."""
  return {
      "name": "malformed",
      "dataset": {"name": "digits"},
      "model": {"name": "small-cnn"},
      "reference": {"batch_size": 512, "noise_multiplier": 2.0555,
                    "steps": 100, "target_epsilon": 8},
      "simulation_batch_sizes": [64, 128],
      "hyperparameters": {
          "lr": {"kind": "loguniform", "low": 0.5, "high": 8},
          "momentum": {"kind": "choice", "values": [0, 0.5]},
          "dampening": {"kind": "uniform", "low": 0, "high": 0.5},
          "ema_decay": {"kind": "choice", "values": [0.9, 0.99]},
          "augmentation": {"kind": "choice", "values": ["none", "crop-flip"]},
          "augmult": {"kind": "int", "low": 1, "high": 4},
      },
      "device": "cpu",
  }


def write(tmp_path: pathlib.Path, data: dict[str, Any]) -> pathlib.Path:
  path = tmp_path / "space.yaml"
  path.write_text(yaml.safe_dump(data))
  return path


def load(tmp_path: pathlib.Path, **changes: Any) -> search_space.SearchSpace:
  """Loads the base space with dotted paths (as keyword names) changed."""
  data = copy.deepcopy(base())
  for dotted, value in changes.items():
    *parents, leaf = dotted.split("__")
    node = data
    for key in parents:
      node = node.setdefault(key, {})
    if value is DELETE:
      del node[leaf]
    else:
      node[leaf] = value
  return search_space.load_search_space(write(tmp_path, data))



def run_config(space, params, dataset_size):
  """A trial's run and its record, with the space resolved against N."""
  record = trial_record.build(
      resolved_lib.resolve(space, dataset_size), params)
  return record.config, record


def asked(space: search_space.SearchSpace, n: int = 60):
  """n trials drawn at random: their params and returned constants."""
  study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
  suggest = trials.define_by_run(space)
  draws = []
  for _ in range(n):
    trial = study.ask()
    constants = suggest(trial)
    draws.append((trial.params, constants))
  return draws
