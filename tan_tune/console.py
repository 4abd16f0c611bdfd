"""A quiet terminal for long work: Ray's output to a log file, a live view here.

Ray prints configuration tables, status tables, warnings and its workers'
logs; the few lines a user needs drown in them. `quiet_terminal` sends
everything written to file descriptors 1 and 2 (Python, C++ and the workers'
forwarded logs alike) to a log file, and hands back a `Console` on the real
terminal for tan_tune's own lines. On a terminal the console keeps a status
block of a few lines refreshed in place; elsewhere (CI, a log) it prints a
status line only when it changed, line by line.
"""

import contextlib
import datetime
import os
import pathlib
import sys
from typing import IO, Iterator

# ANSI: cursor up one line, and erase the line.
_UP, _ERASE = "\x1b[1A", "\x1b[2K"
_active: "Console | None" = None


def active() -> "Console | None":
  """The console of the command running, if it shows a live view.

  Ray Tune pickles its callbacks with the search and restores them on a
  resume, so they find the console here rather than holding a stream.
  """
  return _active


class Console:
  """tan_tune's own output: permanent lines, and a status block kept current.

  Attributes:
    stream: where the lines go (the terminal, when Ray's output is elsewhere).
    live: refresh the status block in place (a terminal) or print each new
      status line once (anything else).
  """

  def __init__(self, stream: IO[str], live: bool | None = None):
    self.stream = stream
    self.live = stream.isatty() if live is None else live
    self._status: list[str] = []

  def line(self, text: str = "") -> None:
    """A line that stays, printed above the status block."""
    self._clear()
    self.stream.write(text + "\n")
    self._draw()

  def status(self, *lines: str) -> None:
    """Replaces the status block; off a terminal, prints only what changed."""
    lines = list(lines)
    if lines == self._status:
      return
    if self.live:
      self._clear()
      self._status = lines
      self._draw()
    else:
      for text in lines:
        if text not in self._status:
          self.stream.write(text + "\n")
      self._status = lines
      self.stream.flush()

  def close(self) -> None:
    """Leaves the last status on screen and moves below it."""
    self._status = []
    self.stream.flush()

  def _clear(self) -> None:
    if self.live and self._status:
      self.stream.write((_UP + _ERASE) * len(self._status))

  def _draw(self) -> None:
    if self.live:
      for text in self._status:
        self.stream.write(text + "\n")
    self.stream.flush()


@contextlib.contextmanager
def quiet_terminal(log_path: pathlib.Path,
                   verbose: bool = False) -> Iterator[Console]:
  """Sends fds 1 and 2 to `log_path` (appended) and yields the terminal.

  With `verbose` nothing is redirected: Ray's output shows as it comes, and
  the console prints line by line beside it.
  """
  global _active
  sys.stdout.flush()
  sys.stderr.flush()
  if verbose:
    _active = Console(sys.stdout, live=False)
    try:
      yield _active
    finally:
      _active = None
    return
  created = [d for d in (log_path.parent, *log_path.parent.parents)
             if not d.exists()]
  log_path.parent.mkdir(parents=True, exist_ok=True)
  saved = {fd: os.dup(fd) for fd in (1, 2)}
  streams = sys.stdout, sys.stderr
  # The console writes where stdout went: fd 1 as it was, or Python's stream
  # when that is not fd 1 (pytest's capture, a notebook).
  terminal = (os.fdopen(os.dup(saved[1]), "w", buffering=1)
              if _writes_to_fd_1(sys.stdout) else sys.stdout)
  with open(log_path, "a", encoding="utf-8", buffering=1) as log:
    log.write(f"--- {datetime.datetime.now().isoformat(timespec='seconds')}"
              f" {' '.join(sys.argv)}\n")
    log.flush()
    for fd in (1, 2):
      os.dup2(log.fileno(), fd)
    # Also Python's streams, which need not write to fds 1 and 2 (pytest).
    sys.stdout = sys.stderr = log
    console = _active = Console(terminal)
    try:
      yield console
    except BaseException:
      _forget(log_path, created)
      raise
    finally:
      _active = None
      console.close()
      sys.stdout, sys.stderr = streams
      for fd, copy in saved.items():
        os.dup2(copy, fd)
        os.close(copy)
      if terminal is not streams[0]:
        terminal.close()


def _forget(log_path: pathlib.Path, created: list[pathlib.Path]) -> None:
  """After a failure, a log alone in folders made for it goes with them:
  a command refused at its first check leaves nothing behind."""
  if not created or any(p != log_path for p in log_path.parent.iterdir()):
    return
  log_path.unlink()
  for folder in created:  # Deepest first.
    if folder.exists() and not any(folder.iterdir()):
      folder.rmdir()


def _writes_to_fd_1(stream: IO[str]) -> bool:
  try:
    return stream.fileno() == 1
  except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation too.
    return False


def say(text: str) -> None:
  """A permanent line: on the live console when there is one, else stdout."""
  console = active()
  if console:
    console.line(text)
  else:
    print(text, flush=True)


def duration(seconds: float) -> str:
  """'1h02m', '3m05s' or '42s'."""
  seconds = max(0, round(seconds))
  hours, rest = divmod(seconds, 3600)
  minutes, seconds = divmod(rest, 60)
  if hours:
    return f"{hours}h{minutes:02d}m"
  return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"
