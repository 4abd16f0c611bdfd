"""The files of a search directory (`<storage>/<search name>`): what the
search writes and `promote` reads back."""

import pathlib

from tan_tune import console

# The driver's state: the MLflow parent run, N and, in a private search,
# the secret number of trials until its release.
STATE_FILE = "tan_tune_search.json"
# The winner, with its reference run's facts: promote's default trial.
BEST_FILE = "best.json"
# Every trial, best first.
LEADERBOARD_FILE = "leaderboard.json"
# The search file as it started: a resumed search reads this copy.
SPACE_FILE = "search_space.yaml"


def check_directory(directory: pathlib.Path, resume: bool) -> None:
  """Raises FileNotFoundError when resuming a search that is not there,
  FileExistsError when starting one where another is."""
  state = directory / STATE_FILE
  if resume and not state.exists():
    raise FileNotFoundError(
        f"no search to resume in {directory} (no {STATE_FILE}); run without"
        " --resume to start one")
  if not resume and state.exists():
    raise FileExistsError(
        f"{directory} already holds a search: resume it with --resume, or"
        " choose another --storage")


def saved_space(directory: pathlib.Path, given: pathlib.Path) -> pathlib.Path:
  """The search file a resumed search runs: the copy saved when it started,
  whatever became of `given` since (said when it changed)."""
  saved = directory / SPACE_FILE
  if saved.read_bytes() != given.read_bytes():
    console.say(f"[tan-tune] warning: {given} changed since the search"
                f" started; it resumes with the copy saved then, {saved}")
  return saved
