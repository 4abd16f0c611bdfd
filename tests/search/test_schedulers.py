"""tan_tune.search.schedulers: Ray Tune's schedulers by the search file's
`scheduler`, each saying whether it stops a trial on other trials'."""

import pytest
from ray.tune import schedulers as tune_schedulers

from tan_tune.errors import ConfigError
from tan_tune.search import schedulers


def test_the_built_ins_build_tunes_schedulers():
  assert schedulers.names() == ("fifo", "asha")
  fifo = schedulers.named("fifo")
  assert not fifo.uses_other_trials
  assert isinstance(fifo.build(40, 10), tune_schedulers.FIFOScheduler)
  asha = schedulers.named("asha")
  assert asha.uses_other_trials
  built = asha.build(40, 10)
  assert isinstance(built, tune_schedulers.AsyncHyperBandScheduler)
  assert (built._time_attr, built._max_t) == ("step", 40)  # pylint: disable=protected-access


def test_an_unknown_scheduler_is_refused_as_the_file_reader_did():
  with pytest.raises(ConfigError) as error:
    schedulers.named("hyperband")
  assert error.value.field == "scheduler"
  assert error.value.allowed == "must be one of ['fifo', 'asha']"
