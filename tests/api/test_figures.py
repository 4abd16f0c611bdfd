"""`api.privacy_wall` (`api/figures.py`): the privacy wall as a PNG file."""

import pytest

from tan_tune import api
from tan_tune.errors import ConfigError


@pytest.mark.slow
def test_the_wall_is_written_where_asked(tmp_path):
  out = api.privacy_wall(str(tmp_path / "wall" / "poisson.png"), 50_000, 8.0,
                         [1000, 4000], samplers=["poisson"])
  assert out == tmp_path / "wall" / "poisson.png"
  assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_bad_delta_is_refused_before_drawing(tmp_path):
  with pytest.raises(ConfigError) as error:
    api.privacy_wall(tmp_path / "wall.png", 50_000, 8.0, [1000], delta=2.0)
  assert error.value.field == "delta"
  assert not (tmp_path / "wall.png").exists()
