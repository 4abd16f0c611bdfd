"""A search directory's files: what may start, resume, or must be redone."""

import pytest

from tan_tune.search import search_files


def test_a_new_search_refuses_a_directory_that_holds_one(tmp_path):
  search_files.check_directory(tmp_path, resume=False)
  (tmp_path / search_files.STATE_FILE).write_text("{}")
  with pytest.raises(FileExistsError, match="--resume"):
    search_files.check_directory(tmp_path, resume=False)


def test_resume_needs_a_search_this_version_wrote(tmp_path):
  with pytest.raises(FileNotFoundError, match="no search to resume"):
    search_files.check_directory(tmp_path, resume=True)
  (tmp_path / search_files.STATE_FILE).write_text("{}")
  with pytest.raises(FileNotFoundError, match="older tan_tune"):
    search_files.check_directory(tmp_path, resume=True)
  (tmp_path / search_files.RESOLVED_FILE).write_text("{}")
  search_files.check_directory(tmp_path, resume=True)


def test_an_edited_file_is_said_and_not_used(tmp_path, capsys):
  (tmp_path / search_files.SPACE_FILE).write_text("eval_every: 10\n")
  given = tmp_path / "space.yaml"
  given.write_text("eval_every: 10\n")
  search_files.warn_if_changed(tmp_path, given)
  assert capsys.readouterr().out == ""
  given.write_text("eval_every: 5\n")
  search_files.warn_if_changed(tmp_path, given)
  assert "resumes with the copy saved then" in capsys.readouterr().out
