"""Tests of the quiet terminal: Ray's output to a log, tan_tune's to the user."""

import io
import os
import subprocess
import sys

from tan_tune import console as console_lib


class _Terminal(io.StringIO):

  def isatty(self):
    return True


def test_off_a_terminal_each_status_line_is_printed_once():
  stream = io.StringIO()
  console = console_lib.Console(stream)
  assert not console.live
  console.status("2 running", "best 0.9")
  console.status("2 running", "best 0.9")  # Unchanged: nothing.
  console.status("1 running", "best 0.9")  # Only the new line.
  console.line("done")
  assert stream.getvalue().splitlines() == [
      "2 running", "best 0.9", "1 running", "done"]


def test_on_a_terminal_the_status_block_is_redrawn_in_place():
  stream = _Terminal()
  console = console_lib.Console(stream)
  assert console.live
  console.status("a", "b")
  console.status("c", "d")
  console.line("kept")
  up_erase = "\x1b[1A\x1b[2K"
  assert stream.getvalue() == (
      "a\nb\n" + up_erase * 2 + "c\nd\n" + up_erase * 2 + "kept\nc\nd\n")


def test_quiet_terminal_sends_everything_else_to_the_log(tmp_path, capfd):
  log = tmp_path / "run" / "search.log"
  with console_lib.quiet_terminal(log) as console:
    print("a Ray table")
    print("a Ray warning", file=sys.stderr)
    os.write(1, b"C++ logging\n")
    subprocess.run([sys.executable, "-c", "print('a worker line')"],
                   check=True)
    console.line("best so far 0.93")
    console_lib.say("calibration at B = 8")
    assert console_lib.active() is console
  assert console_lib.active() is None
  out, err = capfd.readouterr()
  assert out.splitlines() == ["best so far 0.93", "calibration at B = 8"]
  assert err == ""
  text = log.read_text()
  for line in ("a Ray table", "a Ray warning", "C++ logging",
               "a worker line"):
    assert line in text
  print("after")  # The terminal is back.
  assert capfd.readouterr().out == "after\n"


def test_verbose_redirects_nothing(tmp_path, capfd):
  with console_lib.quiet_terminal(tmp_path / "x.log", verbose=True) as console:
    print("a Ray table")
    console.line("best")
  assert capfd.readouterr().out == "a Ray table\nbest\n"
  assert not (tmp_path / "x.log").exists()


def test_durations_read_as_people_write_them():
  assert [console_lib.duration(s) for s in (4.4, 65, 3725)] == [
      "4s", "1m05s", "1h02m"]


def test_a_failure_before_anything_else_is_written_leaves_nothing(tmp_path):
  log = tmp_path / "runs" / "demo" / "search.log"
  try:
    with console_lib.quiet_terminal(log):
      raise ValueError("a wrong --address")
  except ValueError:
    pass
  assert not (tmp_path / "runs").exists()
  # Once the command has written its own files, the log stays with them.
  try:
    with console_lib.quiet_terminal(log):
      (log.parent / "state.json").write_text("{}")
      raise ValueError("later")
  except ValueError:
    pass
  assert log.exists()
