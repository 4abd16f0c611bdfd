"""The files of a search directory (`<storage>/<search name>`): what the
search writes and `promote` reads back."""

import pathlib

from tan_tune import console

# The driver's state: the MLflow parent run and, in a private search, the
# secret number of trials until its release.
STATE_FILE = "tan_tune_search.json"
# The winner, with its run's facts: the trial promote promotes unless told
# another. A private random search's release instead (never promoted).
BEST_FILE = "best.json"
# Every trial, best first.
LEADERBOARD_FILE = "leaderboard.json"
# The search file as it started, for people and MLflow.
SPACE_FILE = "search_space.yaml"
# Everything the search fixed against its data (`resolved.py`): promote,
# calibration and a resumed search read it instead of resolving again.
RESOLVED_FILE = "resolved.json"


def check_directory(directory: pathlib.Path, resume: bool) -> None:
  """Raises FileNotFoundError when resuming a search that is not there (or
  that an older version wrote), FileExistsError when starting one where
  another is."""
  state = directory / STATE_FILE
  if resume and not state.exists():
    raise FileNotFoundError(
        f"no search to resume in {directory} (no {STATE_FILE}); run without"
        " --resume to start one")
  if resume and not (directory / RESOLVED_FILE).exists():
    raise FileNotFoundError(
        f"{directory} was started by an older tan_tune (no {RESOLVED_FILE}):"
        " start it again in another --storage")
  if not resume and state.exists():
    raise FileExistsError(
        f"{directory} already holds a search: resume it with --resume, or"
        " choose another --storage")


def warn_if_changed(directory: pathlib.Path, given: pathlib.Path) -> None:
  """Says so when the search file given to a resumed search is no longer the
  one it started with: it resumes as it started, whatever the edits."""
  saved = directory / SPACE_FILE
  if saved.read_bytes() != given.read_bytes():
    console.say(f"[tan-tune] warning: {given} changed since the search"
                f" started; it resumes with the copy saved then, {saved}")
