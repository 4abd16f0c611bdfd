"""Each trial of a search: Optuna's define-by-run space.

`define_by_run` draws a trial's hyper-parameters from the file's
distributions, `central_params` stands for the space before any search;
`trial_record.build` turns either into the trial's runs.
"""

from typing import Any, Callable

import optuna

from tan_tune.search import space as space_lib
from tan_tune.search.hyperparameters import Distribution
from tan_tune.search.hyperparameters import RULES

# Keys a trial's params hold besides the hyper-parameters.
SIMULATION_BATCH_SIZE = "simulation_batch_size"
STEPS = "steps"


def define_by_run(
    space: space_lib.SearchSpace,
) -> Callable[[optuna.trial.Trial], dict[str, Any]]:
  """The space as an Optuna define-by-run function, for OptunaSearch.

  Suggests every hyper-parameter of the file under its key, skipping those
  whose condition fails (dampening when momentum = 0, augmult when
  augmentation = 'none'), then `simulation_batch_size` (a constant when there
  is one) and `steps` (only with a steps_grid).

  Returns:
    A function of an Optuna trial that returns the constants of the trial.
  """

  def suggest(trial: optuna.trial.Trial) -> dict[str, Any]:
    _draw(space, lambda key, distribution: distribution.suggest(trial, key))
    constants = {}
    batch_sizes = space.simulation_batch_sizes
    if len(batch_sizes) > 1:
      trial.suggest_categorical(SIMULATION_BATCH_SIZE, list(batch_sizes))
    else:
      constants[SIMULATION_BATCH_SIZE] = batch_sizes[0]
    steps = space.proposed_steps()
    if steps:
      trial.suggest_categorical(STEPS, list(steps))
    return constants

  return suggest


def central_params(space: space_lib.SearchSpace) -> dict[str, Any]:
  """A trial at the centre of the space (`Distribution.center`), at its
  first simulated batch size: a run the file stands for before any search."""
  params = _draw(space, lambda _, distribution: distribution.center())
  params[SIMULATION_BATCH_SIZE] = space.simulation_batch_sizes[0]
  return params


def _draw(space: space_lib.SearchSpace,
          draw: Callable[[str, Distribution], Any]) -> dict[str, Any]:
  """`draw` of every hyper-parameter of the file, in RULES' order, skipping
  those whose condition the earlier draws fail."""
  drawn = {}
  for key, rule in RULES.items():
    distribution = space.hyperparameters.get(key)
    condition = rule.condition
    # A parent the file does not search is fixed, and its check found that
    # it enables; a searched one must have been drawn, and enable.
    if distribution is None or (
        condition and condition.parent in space.hyperparameters
        and not (condition.parent in drawn
                 and condition.enables(drawn[condition.parent]))):
      continue
    drawn[key] = draw(key, distribution)
  return drawn
