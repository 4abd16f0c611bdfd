"""`api.parse_release_time` (`api/release_times.py`). (The release itself:
`test_release_time.py`.)"""

import datetime

import pytest

from tan_tune import api
from tan_tune.errors import ConfigError


def test_a_duration_is_read_from_the_runs_start():
  assert api.parse_release_time("+1h30m") == api.ReleaseAt(5400)
  assert api.parse_release_time(datetime.timedelta(minutes=90)) == (
      api.ReleaseAt(5400))


def test_text_it_cannot_read_names_the_field_and_what_is_allowed():
  with pytest.raises(ConfigError) as error:
    api.parse_release_time("2h")
  assert error.value.field == "release_at"
  assert error.value.allowed.startswith("a duration from the run's start")
