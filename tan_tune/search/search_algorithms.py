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

from tan_tune import registries

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


_REGISTRY: registries.Registry[SearchAlgorithm] = registries.Registry(FIELD)
register = _REGISTRY.register
names = _REGISTRY.names
named = _REGISTRY.named


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
