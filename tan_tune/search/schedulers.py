"""When Ray Tune stops a trial: the search file's `scheduler`, one registry.

A scheduler names a Ray Tune trial scheduler and builds it from the
search's settings; it says whether it stops a trial on other trials'
results, which a private random search's accounting does not cover. The
built-ins:

* 'fifo' (default): every trial runs to its end;
* 'asha': asynchronous successive halving stops the poor ones at rungs
  from one evaluation to the longest run, keeping a third at each.

Yours registers as they do:

    @schedulers.register
    class MedianStop(schedulers.Scheduler):
      name = "median"
      uses_other_trials = True

      def build(self, longest, eval_every):
        return tune.schedulers.MedianStoppingRule(
            time_attr="step", grace_period=eval_every)
"""

import abc
from typing import ClassVar

from ray.tune import schedulers as tune_schedulers

from tan_tune import registries

FIELD = "scheduler"


class Scheduler(abc.ABC):
  """A Ray Tune trial scheduler a search file may name.

  Attributes:
    name: its spelling in the search file's `scheduler`.
    uses_other_trials: it stops a trial on other trials' results.
  """

  name: ClassVar[str]
  uses_other_trials: ClassVar[bool]

  @abc.abstractmethod
  def build(self, longest: int,
            eval_every: int) -> tune_schedulers.TrialScheduler:
    """Tune's scheduler for trials of at most `longest` steps that report
    every `eval_every` steps (the time attribute 'step')."""


_REGISTRY: registries.Registry[Scheduler] = registries.Registry(
    FIELD, "must be one of {}")  # As the file reader said before.
register = _REGISTRY.register
names = _REGISTRY.names
named = _REGISTRY.named


@register
class Fifo(Scheduler):
  """Every trial to its end, in the order they start."""

  name = "fifo"
  uses_other_trials = False

  def build(self, longest, eval_every):
    return tune_schedulers.FIFOScheduler()


@register
class Asha(Scheduler):
  """Stops a trial whose score at a rung is below most others'."""

  name = "asha"
  uses_other_trials = True

  def build(self, longest, eval_every):
    return tune_schedulers.ASHAScheduler(
        time_attr="step", max_t=longest, grace_period=eval_every,
        reduction_factor=3)
