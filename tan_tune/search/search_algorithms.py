"""How Optuna proposes a trial's hyper-parameters: the search file's
`sampler`, one registry.

A search algorithm names an Optuna sampler and builds it from a seed; it
says whether its proposals adapt to earlier trials' results, which a
private random search cannot account (Papernot & Steinke cover
hyper-parameters drawn independently of the data). The built-ins:

* 'tpe' (default): Optuna's multivariate, grouped Tree-structured Parzen
  Estimator, which adapts;
* 'random': independent draws.

Yours registers as they do:

    @search_algorithms.register
    class Qmc(search_algorithms.SearchAlgorithm):
      name = "qmc"
      adaptive = False

      def sampler(self, seed):
        return optuna.samplers.QMCSampler(seed=seed)
"""

import abc
from typing import ClassVar

import optuna

from tan_tune.errors import ConfigError

FIELD = "sampler"


class SearchAlgorithm(abc.ABC):
  """An Optuna sampler a search file may name.

  Attributes:
    name: its spelling in the search file's `sampler`.
    adaptive: its proposals depend on earlier trials' results.
  """

  name: ClassVar[str]
  adaptive: ClassVar[bool]

  @abc.abstractmethod
  def sampler(self, seed: int) -> optuna.samplers.BaseSampler:
    """A new Optuna sampler, seeded."""


_ALGORITHMS: dict[str, SearchAlgorithm] = {}


def register(cls: type[SearchAlgorithm]) -> type[SearchAlgorithm]:
  """Class decorator: makes a search algorithm available by its `name`."""
  _ALGORITHMS[cls.name] = cls()
  return cls


def names() -> tuple[str, ...]:
  return tuple(_ALGORITHMS)


def named(name: str) -> SearchAlgorithm:
  """The search algorithm a search file's `sampler` spells.

  Raises:
    ConfigError: no such algorithm.
  """
  if name not in _ALGORITHMS:
    raise ConfigError(FIELD, name, f"one of {list(_ALGORITHMS)}")
  return _ALGORITHMS[name]


@register
class Tpe(SearchAlgorithm):
  """Multivariate TPE over groups of parameters drawn together."""

  name = "tpe"
  adaptive = True

  def sampler(self, seed):
    return optuna.samplers.TPESampler(seed=seed, multivariate=True,
                                      group=True)


@register
class Random(SearchAlgorithm):
  """Each trial's hyper-parameters drawn independently."""

  name = "random"
  adaptive = False

  def sampler(self, seed):
    return optuna.samplers.RandomSampler(seed=seed)
