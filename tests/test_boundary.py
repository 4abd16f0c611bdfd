"""Tests for tan_tune.search.boundary: owner-only files and temp folders."""

import os
import pathlib
import shutil
import stat
import tempfile


from tan_tune.search import boundary


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
