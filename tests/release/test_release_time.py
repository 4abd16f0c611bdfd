"""A release at a fixed time, and the line that says who can date a run."""

import datetime
import os
import time

import pytest

from tan_tune.errors import ConfigError
from tan_tune.release import release
from tan_tune.release import release_time


@pytest.mark.parametrize("text, seconds", [
    ("+45s", 45), ("+90m", 5400), ("+2h", 7200), ("+1h30m", 5400),
    ("+1d", 86400), ("+0.5h", 1800),
])
def test_a_duration_counts_from_the_start(text, seconds):
  when = release_time.parse(text)
  assert when == release_time.ReleaseAt(seconds)
  assert when.moment(1000.0) == 1000.0 + seconds


def test_a_moment_is_absolute_and_local_unless_it_says_otherwise():
  coming = datetime.datetime.now().replace(microsecond=0) + datetime.timedelta(
      days=2)
  local = release_time.parse(coming.isoformat())
  assert local == release_time.ReleaseAt(coming.timestamp(), absolute=True)
  assert local.moment(0.0) == coming.timestamp()
  utc = release_time.parse("2999-07-01T07:00Z")
  assert utc.seconds == datetime.datetime(
      2999, 7, 1, 7, tzinfo=datetime.timezone.utc).timestamp()
  assert release_time.parse(datetime.timedelta(minutes=5)).seconds == 300
  assert release_time.parse(coming) == local


@pytest.mark.parametrize("value, allowed", [
    ("2h", "such as .90m"), ("+5x", "such as .90m"), ("soon", "ISO 8601"),
    ("+0s", "a duration above 0"), (datetime.timedelta(0), "above 0"),
    ("2001-01-01T00:00", "a moment still to come"),
])
def test_anything_else_is_one_line_naming_the_field(value, allowed):
  with pytest.raises(ConfigError, match=allowed) as error:
    release_time.parse(value, "--release-at")
  assert str(error.value).startswith("--release-at: ")
  assert "\n" not in str(error.value)


class _Clock:
  """time.time and time.sleep of a clock that only sleeping moves."""

  def __init__(self, now: float):
    self.now = now
    self.slept: list[float] = []

  def time(self) -> float:
    return self.now

  def sleep(self, seconds: float) -> None:
    self.slept.append(seconds)
    self.now += seconds


@pytest.fixture
def clock(monkeypatch):
  fake = _Clock(1000.0)
  monkeypatch.setattr(release_time.time, "time", fake.time)
  monkeypatch.setattr(release_time.time, "sleep", fake.sleep)
  return fake


def test_the_last_writes_wait_for_the_release_time(clock, capsys):
  out = release.Release(990.0, release_time.ReleaseAt(60))
  out.wait()
  assert (clock.slept, clock.now) == ([50.0], 1050.0)
  assert capsys.readouterr().err == ""


def test_a_run_past_its_release_time_says_so_in_one_line(clock, capsys):
  out = release.Release(900.0, release_time.ReleaseAt(60))
  out.wait()
  assert clock.slept == []
  assert capsys.readouterr().err == release_time.LATE + "\n"


def test_without_a_release_time_nothing_waits(clock, capsys):
  release.Release(990.0).wait()
  assert clock.slept == [] and capsys.readouterr().err == ""


def _warned(capsys, *covered, release_at=None) -> list[str]:
  """What a run covering `covered` says once under way."""
  out = release.Release(release_at=release_at)
  out.covers(*covered)
  out.warn_if_stat_able()
  return capsys.readouterr().err.splitlines()


def test_a_store_other_users_can_stat_is_said_in_one_line(opened, capsys):
  """mlflow.db in a 0755 folder: anyone may `stat` it, and its ctime is
  the end of the last run that wrote it."""
  store = f"sqlite:///{opened}/mlflow.db"
  [line] = _warned(capsys, store, opened / "runs" / "private")
  assert line.startswith("[tan-tune] warning: other users can stat")
  assert f"{opened}/mlflow.db, {opened}/runs/private:" in line
  assert "--release-at" in line and "chmod 700" in line
  # With a release time, its ctime tells that time alone.
  assert _warned(capsys, store, release_at=release_time.ReleaseAt(60)) == []


def test_a_store_no_other_user_can_reach_is_not_mentioned(tmp_path, capsys):
  assert _warned(capsys, f"sqlite:///{tmp_path}/mlflow.db",
                 tmp_path / "r") == []


def test_a_store_behind_a_symlink_is_judged_where_it_leads(hidden_link,
                                                          capsys):
  """A 0700 folder holding a link to a 0755 one: the store is where the
  link leads, in the open."""
  [line] = _warned(capsys, f"sqlite:///{hidden_link}/mlflow.db",
                   hidden_link / "checkpoints")
  real = hidden_link.resolve()
  assert f"stat {real}/mlflow.db, {real}/checkpoints:" in line


def test_stamping_at_a_release_time_changes_no_mtime(tmp_path):
  """Every file the run covers gets a new ctime at the seal, its times as
  they were: a file stamped at t_0 when logged (an artifact) kept the
  ctime of that moment, which dated the end of the run."""
  started = time.time() - 100
  logged = tmp_path / "runs" / "model.pt"
  logged.parent.mkdir()
  logged.write_bytes(b"weights")
  for path in (logged, logged.parent):
    os.utime(path, (started, started))
  before = {p: p.stat() for p in (logged, logged.parent)}
  time.sleep(0.05)  # Past the file system's clock tick.
  out = release.Release(started, release_time.ReleaseAt(1))
  out.covers(logged.parent)
  out.seal()
  for path, was in before.items():
    now = path.stat()
    assert now.st_mtime_ns == was.st_mtime_ns
    assert now.st_ctime_ns > was.st_ctime_ns
