"""How a search file names its tuning strategy: one registry, by
`tuning_privacy`.

A tuning strategy (`strategy.py`) is how a search is run and accounted: the
built-ins (`modes.py`) are `non_private` (TAN's practice, the default),
`public_data` and `private_random_search`. Each registers here by the name a
search file spells it with, as yours would:

    @tuning_mode.register
    class FirstTwo(modes.SimulatedSearch):
      name = "first-two"
      note = "..."

      def trial_count(self, state, space, num_samples):
        return 2

The search file's schema (`space.py`) parses `tuning_privacy` here and asks
the strategy for its own checks of the file; the driver, the promotion and
the release ask it the rest. The strategies are registered when
`tan_tune.search` is imported; yours, before its search file is read.
"""

from typing import Any

from tan_tune.errors import ConfigError
from tan_tune.search.hyperparameters import check
from tan_tune.training import datasets

FIELD = "tuning_privacy"
# Each registered strategy (a `strategy.TuningStrategy`) by its name.
_STRATEGIES: dict[str, Any] = {}


def register(cls: type) -> type:
  """Class decorator: makes a `strategy.TuningStrategy` available by its
  `name`."""
  _STRATEGIES[cls.name] = cls()
  return cls


def names() -> tuple[str, ...]:
  return tuple(_STRATEGIES)


def named(name: str) -> Any:
  """The `strategy.TuningStrategy` a search file's `tuning_privacy` spells.

  Raises:
    ConfigError: no such strategy.
  """
  if name not in _STRATEGIES:
    raise ConfigError(FIELD, name, f"one of {', '.join(_STRATEGIES)}")
  return _STRATEGIES[name]


def found(name: Any) -> Any:
  """The strategy `name` spells, or None (an MLflow tag written by another
  version, or by a strategy this process has not registered)."""
  return _STRATEGIES.get(name)


def reading(field: str) -> str:
  """The strategies that read the search file's `field`, as an error says
  them ('a or b')."""
  return " or ".join(name for name, strategy in _STRATEGIES.items()
                     if field in strategy.fields)


def check_public_dataset(space, private, public) -> None:
  """public_data, once both datasets are loaded: other examples than the
  private data's (paths and names can differ for the same data), and
  enough of them for every trial's batch."""
  check(datasets.examples(public) != datasets.examples(private),
        "public_dataset", space.public_dataset.title,
        f"other examples than the private dataset {space.dataset.title}'s:"
        " these are the same data")
  largest = max(space.simulation_batch_sizes)
  check(largest <= public.num_train, "simulation_batch_sizes", largest,
        f"at most the public dataset's N = {public.num_train}")
