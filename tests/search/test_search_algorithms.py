"""tan_tune.search.search_algorithms: Optuna's samplers by the search
file's `sampler`, each saying whether it adapts to earlier trials."""

import optuna
import pytest

from tan_tune.errors import ConfigError
from tan_tune.search import search_algorithms


def test_the_built_ins_build_seeded_samplers():
  assert search_algorithms.names() == ("tpe", "random")
  tpe = search_algorithms.named("tpe")
  assert tpe.adaptive
  assert isinstance(tpe.sampler(3), optuna.samplers.TPESampler)
  random = search_algorithms.named("random")
  assert not random.adaptive
  draws = [random.sampler(7).sample_independent(
      None, None, "x", optuna.distributions.FloatDistribution(0, 1))
           for _ in range(2)]
  assert draws[0] == draws[1]  # The same seed, the same draw.


def test_an_unknown_sampler_names_the_field_and_the_choices():
  with pytest.raises(ConfigError) as error:
    search_algorithms.named("grid")
  assert error.value.field == "sampler"
  assert error.value.allowed == "one of ['tpe', 'random']"
