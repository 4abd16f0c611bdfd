"""Tests for tan_tune.release.boundary: owner-only files, temp folders."""

import fcntl
import os
import pathlib
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading

import pytest
import ray

from tan_tune.errors import ConfigError
from tan_tune.release import boundary

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _mode(path: pathlib.Path) -> int:
  return stat.S_IMODE(path.stat().st_mode)


def test_inside_the_boundary_files_are_owner_only(tmp_path):
  with boundary.private_run("unit", use_ray=False):
    (tmp_path / "checkpoint.pt").write_bytes(b"secret")
    (tmp_path / "folder").mkdir()
  (tmp_path / "after.txt").write_text("public")
  assert _mode(tmp_path / "checkpoint.pt") == 0o600
  assert _mode(tmp_path / "folder") == 0o700
  assert _mode(tmp_path / "after.txt") & 0o044  # The umask is given back.


def test_a_module_first_imported_inside_leaves_no_bytecode(tmp_path,
                                                          monkeypatch):
  """A team's factory imported mid-run: a `__pycache__` beside it would
  carry the run's time."""
  (tmp_path / "team_factory.py").write_text("NETWORK = 'cnn'\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  monkeypatch.setattr(sys, "dont_write_bytecode", False)
  with boundary.private_run("unit", use_ray=False):
    __import__("team_factory")
  assert sorted(p.name for p in tmp_path.iterdir()) == ["team_factory.py"]
  assert not sys.dont_write_bytecode  # Given back.
  sys.modules.pop("team_factory")


def test_a_worker_folder_is_owner_only_and_named_for_its_run():
  folder = boundary.worker_folder("unit-folder")
  assert folder.parent.name == "tan_tune-unit-folder"
  assert _mode(folder) == _mode(folder.parent) == 0o700
  shutil.rmtree(folder.parent)


def test_the_run_key_is_the_same_for_the_same_folder(tmp_path):
  key = boundary.run_key("search", tmp_path / "runs" / "digits")
  assert key == boundary.run_key("search", tmp_path / "runs" / ".." / "runs"
                                 / "digits")
  assert key != boundary.run_key("promote", tmp_path / "runs" / "digits")
  assert str(tmp_path) not in key


def test_a_killed_runs_folders_go_on_every_node(local_ray):
  # What a killed worker left (a checkpoint with generator states).
  stale = pathlib.Path(tempfile.gettempdir()) / "tan_tune-unit-killed"
  stale.mkdir(exist_ok=True)
  (stale / "checkpoint.pt").write_bytes(b"generator states")
  with boundary.private_run("unit-killed") as private:
    assert not stale.exists()  # Cleared before the run starts.
    folder = boundary.worker_folder(private.key)
    assert os.environ.get("TMPDIR") != str(private.root)  # Ray was running.
  assert not folder.exists()
  assert not private.root.exists()


# A private run whose Ray the boundary starts (it needs a process with no Ray
# yet): it prints its root, runs a task, and lives until told to end.
_PRIVATE_RUN = """
import sys
import ray
from tan_tune.release import boundary

with boundary.private_run("unit-poll") as private:
  print(private.root, flush=True)
  ray.get(ray.remote(lambda: 1).remote())
  print("ran", flush=True)
  sys.stdin.readline()
"""


def _others_may_reach(path: pathlib.Path) -> bool:
  """Another user reaches `path` only through folders that grant others x."""
  return all(_mode(folder) & stat.S_IXOTH for folder in path.parents)


def _poll(root: pathlib.Path, stop: threading.Event,
          opened: list[pathlib.Path], exposed: list[pathlib.Path]) -> None:
  """Until `stop`: every path under `root` with others' permission bits
  (`opened`), and those of them another user can reach (`exposed`)."""
  while not stop.is_set():
    for folder, names, files in os.walk(root):
      for path in [pathlib.Path(folder), *(pathlib.Path(folder) / name
                                           for name in names + files)]:
        try:
          if _mode(path) & 0o007:
            opened.append(path)
            if _others_may_reach(path):
              exposed.append(path)
        except FileNotFoundError:
          pass  # Gone meanwhile.
    stop.wait(0.02)


@pytest.mark.ray
def test_ray_never_opens_the_private_root_to_other_users():
  """Ray makes its temp dir and session folders 0777 while it runs; the
  run's root around them stays 0700, so no other user reaches them."""
  run = subprocess.Popen(
      [sys.executable, "-c", _PRIVATE_RUN], cwd=ROOT, text=True,
      stdin=subprocess.PIPE, stdout=subprocess.PIPE,
      env=dict(os.environ, RAY_AUTH_MODE="disabled"))
  try:
    root = pathlib.Path(run.stdout.readline().strip())
    assert root.is_absolute(), "the run did not start"
    stop, opened, exposed = threading.Event(), [], []
    poller = threading.Thread(target=_poll,
                              args=(root, stop, opened, exposed))
    poller.start()
    ran = run.stdout.readline()
    stop.set()
    poller.join()
    assert ran.strip() == "ran"
    assert _mode(root) == 0o700
    assert opened  # Ray did open its own folders...
    assert not exposed, sorted(set(exposed))[:5]  # ...behind the root.
  finally:
    run.communicate("end\n", timeout=120)
  assert not root.exists()


def _temp_parent() -> pathlib.Path:
  """Where runs make their roots."""
  with boundary.private_run("unit-where", use_ray=False) as private:
    return private.root.parent


@pytest.mark.slow
def test_a_killed_runs_root_goes_at_the_next_start_a_live_runs_stays():
  killed = subprocess.Popen(
      [sys.executable, "-c", "import sys\n"
       "from tan_tune.release import boundary\n"
       "with boundary.private_run('unit-killed', use_ray=False) as p:\n"
       "  print(p.root, flush=True)\n"
       "  sys.stdin.readline()\n"],
      cwd=ROOT, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
  left = pathlib.Path(killed.stdout.readline().strip())
  assert left.is_absolute(), "the run did not start"
  (left / "checkpoint.pt").write_bytes(b"generator states")
  killed.send_signal(signal.SIGKILL)
  killed.communicate()
  assert left.exists()  # What a killed run leaves.
  live = pathlib.Path(tempfile.mkdtemp(prefix="tan_tune_",
                                       dir=_temp_parent()))
  lock = os.open(live, os.O_RDONLY)
  fcntl.flock(lock, fcntl.LOCK_EX)  # As a concurrent run holds it.
  try:
    with boundary.private_run("unit-next", use_ray=False):
      assert not left.exists()
      assert live.exists()
  finally:
    os.close(lock)
    shutil.rmtree(live)


def test_a_private_run_refuses_a_ray_other_users_can_reach(local_ray):
  """The session's Ray lies in an owner-only parent (conftest.py): opened to
  others, as a notebook's `ray.init()` in /tmp/ray is, it is refused."""
  del local_ray
  session = pathlib.Path(
      ray._private.worker._global_node.get_session_dir_path())  # pylint: disable=protected-access
  boundary.require_private_ray(None)
  [hidden] = [f for f in session.parents if _mode(f) & 0o077 == 0]
  hidden.chmod(0o755)
  try:
    with pytest.raises(ConfigError, match=(
        f"its session folder {session} is readable by other users.*"
        r"ray\.shutdown\(\).*address=")):
      boundary.require_private_ray(None)
    boundary.require_private_ray("auto")  # A cluster: its own set-up.
  finally:
    hidden.chmod(0o700)


def test_a_path_is_judged_where_a_symlink_leads(hidden_link):
  """A link in a 0700 folder to a 0755 one: its own path passes through the
  0700 folder, but other users reach where it leads."""
  session = hidden_link / "session"
  session.mkdir(mode=0o777)
  session.chmod(0o777)  # As Ray makes its session folders.
  assert boundary.reachable_by_others(session)
  assert not boundary.reachable_by_others(hidden_link.parent)


def test_a_ray_whose_temp_dir_is_a_symlink_to_an_open_folder_is_refused(
    hidden_link, monkeypatch):
  """`ray.init(_temp_dir=<a link in a 0700 folder to a 0755 one>)`: Ray
  names its session folder through the link, and every user reads its
  workers' logs (each trial's name) where the link leads."""
  session = hidden_link / "session_2025-01-01_00-00-00_000000_1"
  session.mkdir()

  class Node:
    def get_session_dir_path(self) -> str:
      return str(session)

  monkeypatch.delenv("RAY_ADDRESS", raising=False)
  monkeypatch.setattr(ray, "is_initialized", lambda: True)
  monkeypatch.setattr(ray._private.worker, "_global_node", Node())  # pylint: disable=protected-access
  with pytest.raises(ConfigError, match=(
      f"its session folder {session} \\(at {hidden_link.resolve()}/session_.*"
      r"\) is readable by other users")):
    boundary.require_private_ray(None)


@pytest.mark.parametrize("planted", ["open", "link"])
def test_a_workers_folder_someone_else_opened_is_refused(opened, planted):
  """The run's temp folder on a node, `tan_tune-<key>`, made beforehand
  where other users reach it (0755, or a link to such a folder, judged
  where it leads): its checkpoints would hold the secret generators."""
  parent = pathlib.Path(tempfile.gettempdir()) / f"tan_tune-unit-{planted}"
  if planted == "open":
    parent.mkdir(mode=0o755)
    parent.chmod(0o755)
  else:
    parent.symlink_to(opened)
  try:
    with pytest.raises(ConfigError, match=f"temp folder: '{parent}'"):
      boundary.worker_folder(f"unit-{planted}")
    assert list(opened.iterdir()) == []
  finally:
    if planted == "open":
      shutil.rmtree(parent)
    else:
      parent.unlink()
