"""A release at a time fixed in advance (`--release-at`), and what else dates
a private run for other users.

A `Release` stamps every mtime of a run back to its start, but no one can set
a ctime: changing a file, or stamping it, sets its ctime to the clock. Anyone
who may `stat` a file (who can pass through the folders above it) reads it,
and a private search's end counts its trials. So a run may name its release
time: `+2h` (a duration from its start) or `2025-07-01T09:00` (a moment,
local unless it has an offset). The command then holds its last writes (the
files' seal, the deletion of its log) until that time, and the ctimes it
leaves, and the end of its process, tell that time alone. A run not done by
then releases when it is done and says so in one line: its charge is spent
either way, and its ctimes then date its end.

Without a release time, a run whose store or folder other users can `stat`
says so in one line once it is under way, its input checked and its
charge made (`warn_if_stat_able`).
"""

import dataclasses
import datetime
import os
import re
import sys
import time

from tan_tune import console
from tan_tune.errors import ConfigError
from tan_tune.release import exposure

FIELD = "release_at"
ALLOWED = ("a duration from the run's start, such as +90m, +2h or +1h30m"
           " (units d, h, m, s), or a moment to come in ISO 8601, such as"
           " 2025-07-01T09:00 (local time) or 2025-07-01T07:00Z")
LATE = ("[tan-tune] warning: the run was not done by its release time"
        " (--release-at): released now, so the change times (ctime) of its"
        " files tell when it ended")
STAT_ABLE = ("[tan-tune] warning: other users can stat {paths}: their change"
             " times (ctime) will tell when this private run ended; release at"
             " a time fixed in advance (--release-at of search, promote and"
             " train), or keep them in a folder only you can enter (chmod 700)")
_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
_DURATION = re.compile(r"\+((?:\d+(?:\.\d+)?[dhms])+)")
_PART = re.compile(r"(\d+(?:\.\d+)?)([dhms])")


@dataclasses.dataclass(frozen=True)
class ReleaseAt:
  """When a run releases.

  Attributes:
    seconds: after the run's start; or, when `absolute`, since the epoch.
    absolute: a moment rather than a duration.
    given: as the user wrote it, for messages.
  """

  seconds: float
  absolute: bool = False
  given: str = dataclasses.field(default="", compare=False)

  def __str__(self) -> str:
    return self.given or (f"{self.seconds:g} s since the epoch"
                          if self.absolute else f"+{self.seconds:g}s")

  def moment(self, started: float) -> float:
    """The release time, in seconds since the epoch, of a run started at
    `started` (a resumed run's first start)."""
    return self.seconds if self.absolute else started + self.seconds


# What `release_at` may be: a `ReleaseAt`, its text, a moment or a duration.
ReleaseTime = str | datetime.datetime | datetime.timedelta | ReleaseAt


def parse(value: ReleaseTime, field: str = FIELD) -> ReleaseAt:
  """A release time from its text, a `datetime` (a moment; naive is local)
  or a `timedelta` (from the start).

  Raises:
    ConfigError: anything else, a duration not above 0, or a moment past.
  """
  if isinstance(value, ReleaseAt):
    return value
  if isinstance(value, datetime.timedelta):
    return _duration(value.total_seconds(), value, field)
  if isinstance(value, datetime.datetime):
    return _moment(value, value, field)
  text = str(value).strip()
  if _DURATION.fullmatch(text):
    return _duration(sum(float(number) * _UNITS[unit]
                         for number, unit in _PART.findall(text)),
                     value, field)
  try:
    moment = datetime.datetime.fromisoformat(text)
  except ValueError:
    raise ConfigError(field, value, ALLOWED) from None
  return _moment(moment, value, field)


def _duration(seconds: float, value: ReleaseTime, field: str) -> ReleaseAt:
  if seconds <= 0:
    raise ConfigError(field, str(value), f"{ALLOWED}; a duration above 0")
  return ReleaseAt(seconds, given=str(value))


def _moment(moment: datetime.datetime, value: ReleaseTime,
            field: str) -> ReleaseAt:
  seconds = moment.timestamp()  # A naive moment is local time.
  if seconds <= time.time():
    raise ConfigError(field, str(value), f"{ALLOWED}; a moment still to come")
  return ReleaseAt(seconds, absolute=True, given=str(value))


def wait_until(moment: float) -> None:
  """Sleeps until `moment` (seconds since the epoch); past it, says so in
  one line (`LATE`)."""
  left = moment - time.time()
  if left <= 0:
    _say(LATE)
    return
  while left > 0:  # A signal handler may end a sleep early.
    time.sleep(left)
    left = moment - time.time()


def warn_if_stat_able(paths: list[os.PathLike | str]) -> None:
  """One line naming those of `paths` (a private run's store and folders)
  that other users can `stat`, where they resolve; nothing when none is."""
  seen = [str(exposure.resolved(p)) for p in paths
          if exposure.stat_able_by_others(p)]
  if seen:
    _say(STAT_ABLE.format(paths=", ".join(seen)))


def _say(line: str) -> None:
  """A warning on the command's live console, else on stderr: `train
  --json` keeps stdout for its JSON."""
  if console.active():
    console.say(line)
  else:
    print(line, file=sys.stderr, flush=True)
