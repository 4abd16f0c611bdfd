"""Who else can reach a path: the exposure checks of a private run.

Each check resolves its path first (symlinks and '..', `os.path.realpath`):
a link inside an owner-only folder may point anywhere, and what other users
reach is where it points. A Ray started with `_temp_dir` a link in a 0700
folder to a 0755 one passed the unresolved check while every user could
read its workers' logs.
"""

import os
import pathlib
import stat

# Group or others may pass through a folder (its x bits).
_THROUGH = stat.S_IXGRP | stat.S_IXOTH


def resolved(path: os.PathLike | str) -> pathlib.Path:
  """`path` with every symlink and '..' resolved, as far as it exists."""
  return pathlib.Path(os.path.realpath(path))


def reachable_by_others(path: os.PathLike | str) -> bool:
  """Whether another user could reach `path`: only if every folder on the
  way to where it resolves, and that place itself, lets group or others
  through (x)."""
  real = resolved(path)
  return all(os.stat(folder).st_mode & _THROUGH
             for folder in [real, *real.parents])


def stat_able_by_others(path: os.PathLike | str) -> bool:
  """Whether another user could `stat` `path`, or what a run will make
  there: whether they can reach the nearest existing folder above where it
  resolves. `stat` shows a file's ctime, which no one can set back."""
  real = resolved(path)
  folder = next(p for p in real.parents if p.exists())
  return reachable_by_others(folder)
