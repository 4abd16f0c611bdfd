"""A private run's release time (`release_at` of `search`, `promote` and
`train`), read from what a caller wrote.

Light to import: a command line parses `--release-at` while it reads its
arguments, before anything runs, and says in one line what it cannot read.
"""

from tan_tune.release import release_time
# Re-exported as the API's own, so that its reference renders the class.
from tan_tune.release.release_time import ReleaseAt

ReleaseTime = release_time.ReleaseTime
"""What `release_at` may be: '+2h', a `datetime` (a moment; naive is
local), a `timedelta` from the run's start, or a `ReleaseAt` already read."""


def parse_release_time(value: ReleaseTime) -> ReleaseAt:
  """The release time `value` names: '+90m', '+1h30m' (from the run's
  start) or '2025-07-01T09:00' (a moment to come, local time).

  Args:
    value: that text, a `datetime`, a `timedelta` or a `ReleaseAt`
      (`ReleaseTime`).

  Raises:
    ConfigError: field `release_at`, with what is allowed: text that is
      neither, a duration not above 0, or a moment past.
  """
  return release_time.parse(value)
