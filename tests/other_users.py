"""What another local user of the machine sees of a flow's files.

Who may pass through the folders above a path: read, write and enter bits
for group and others, folder by folder, as another user walks them
(`exposed`), following a symlink to wherever it resolves; and the ctime of
each path they may `stat` (`ctimes_seen_by_others`), which no one can set
back. The leak scanner's view, test code alone, kept apart from the
package's own checks (`release/exposure.py`) so that each tests the
other.
"""

import os
import pathlib
import stat
import subprocess

# Another user, where this process may become one (root): nobody's uid.
OTHER_UID = 65534


def exposed(tops: list[pathlib.Path], old: set[str]) -> list[str]:
  """'path: mode' for every path under the folders `tops` (a sandbox's,
  which stand for a working directory, HOME and /tmp, and so count as
  reached) but `old` that another local user can read or write.

  Group and others count only where they may enter every folder on the way
  down from a folder of `tops`: a 0777 folder inside a 0700 one is out of
  reach. An empty folder's read bits show nothing; its write bits let others
  plant files. A symlink to a place outside `tops` leads there: what
  lies where it resolves counts with the folders on the real way to it, as
  another user would walk them (a link in a 0700 folder to a 0755 one).
  """
  tops = [str(top) for top in tops]
  return [line for top in tops
          for line in _exposed_under(top, os.lstat(top).st_mode & 0o011,
                                     old, tops, set())]


def _exposed_under(top: str, reach: int, old: set[str], tops: list[str],
                   visited: set[str]) -> list[str]:
  """`exposed` below `top`, which group (0o010) and others (0o001) in
  `reach` may enter; links out of `tops` followed once each."""
  found = []
  enter = {top: reach}  # Who reaches each folder.
  for parent, folders, files in os.walk(top):
    for name in folders + files:
      path = os.path.join(parent, name)
      try:
        info = os.lstat(path)
        empty = stat.S_ISDIR(info.st_mode) and not os.listdir(path)
      except OSError:  # Gone since the walk listed it: the run goes on.
        continue
      mode, reach = stat.S_IMODE(info.st_mode), enter.get(parent, 0)
      if stat.S_ISDIR(info.st_mode):
        enter[path] = reach & mode
      if stat.S_ISLNK(info.st_mode):
        found += _through_link(path, old, tops, visited)
        continue
      if path in old:
        continue
      if mode & _usable(reach) & (0o022 if empty else 0o066):
        found.append(f"{path}: {mode:o}")
  return found


def _through_link(link: str, old: set[str], tops: list[str],
                  visited: set[str]) -> list[str]:
  """What a link out of `tops` exposes where it resolves, as another user
  reaches it there: through its real parents."""
  target = os.path.realpath(link)
  inside = any(os.path.commonpath([target, top]) == top for top in tops)
  if inside or target in visited:
    return []
  visited.add(target)
  try:
    if os.path.isdir(target):
      return _exposed_under(target, _real_reach(target), old, tops, visited)
    mode = stat.S_IMODE(os.stat(target).st_mode)
    reach = _real_reach(os.path.dirname(target))
  except OSError:  # Gone, or dangling.
    return []
  return [f"{target}: {mode:o}"] if mode & _usable(reach) & 0o066 else []


def _usable(reach: int) -> int:
  """The read and write bits that count for whoever `reach` lets in."""
  return (0o060 if reach & 0o010 else 0) | (0o006 if reach & 0o001 else 0)


def _real_reach(folder: str) -> int:
  """Who (group 0o010, others 0o001) may enter `folder` through every real
  folder above it."""
  reach = 0o011
  for step in [pathlib.Path(folder), *pathlib.Path(folder).parents]:
    reach &= os.stat(step).st_mode
  return reach


def ctimes_seen_by_others(folder: pathlib.Path) -> dict[str, float]:
  """The ctime of every path under `folder` ('.' for itself) that another
  user can `stat`, by name relative to it: read as uid `OTHER_UID` (`find`)
  where this process may become another user (root); else, here, of each
  path whose folders let group or others through to it. A ctime is when a
  file, or its mode or times, last changed: no one can set it back."""
  folder = pathlib.Path(folder)
  if os.geteuid() == 0:
    done = subprocess.run(
        ["find", str(folder), "-printf", r"%C@ %P\n"], user=OTHER_UID,
        group=OTHER_UID, extra_groups=[], cwd="/", capture_output=True,
        text=True, check=False)  # Folders it may not read: on stderr.
    rows = (line.partition(" ") for line in done.stdout.splitlines())
    return {name or ".": float(ctime) for ctime, _, name in rows}
  return {path.relative_to(folder).as_posix(): path.lstat().st_ctime
          for path in [folder, *folder.rglob("*")]
          if _real_reach(os.path.realpath(path.parent))}
