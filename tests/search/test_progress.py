"""Tests of the live views: the search's counts and best, promote's steps."""

import io
import types

from tan_tune import console as console_lib
from tan_tune.search import progress


def _trial(trial_id, status, step=20, lr=1.0):
  return types.SimpleNamespace(
      trial_id=trial_id, status=status, config={"lr": lr},
      last_result={"step": step, "steps_total": 20})


def test_the_search_view_counts_trials_and_keeps_the_best(monkeypatch):
  stream = io.StringIO()
  monkeypatch.setattr(console_lib, "_active", console_lib.Console(stream))
  view = progress.SearchProgress("demo", "ema_accuracy", "max", 4)
  a, b, c = _trial("a", "RUNNING"), _trial("b", "RUNNING", lr=2.0), _trial(
      "c", "RUNNING", step=10)
  trials = [a, b, c]
  view.on_trial_start(0, trials, a)  # Off a terminal: no line for a start.
  view.on_trial_result(0, trials, a, {"ema_accuracy": 0.8, "step": 20,
                                      "steps_total": 20})
  view.on_trial_result(0, trials, b, {"ema_accuracy": 0.7, "step": 20,
                                      "steps_total": 20})  # Not better.
  view.on_trial_complete(0, trials, a)  # Ray has not marked it yet.
  view.on_trial_error(0, trials, b)
  c.last_result = {"step": 10, "steps_total": 20}
  view.on_trial_complete(0, trials, c)  # Stopped early by ASHA.
  lines = stream.getvalue().splitlines()
  assert "best ema_accuracy so far 0.8000: trial a (lr=1)" in lines[1]
  assert "trial b failed" in stream.getvalue()
  assert lines[-1].startswith(
      "search demo: 3/4 trials done (1 finished, 1 pruned, 1 failed),"
      " 0 running;")
  assert "left" in lines[-1]


def test_without_a_console_the_view_is_silent(capsys):
  view = progress.SearchProgress("demo", "ema_accuracy", "max", 1)
  view.on_trial_complete(0, [_trial("a", "RUNNING")], _trial("a", "RUNNING"))
  assert capsys.readouterr().out == ""


def test_a_private_search_view_never_counts_its_trials(monkeypatch):
  stream = io.StringIO()
  monkeypatch.setattr(console_lib, "_active", console_lib.Console(stream))
  view = progress.SecretSearchProgress("private")
  trials = [_trial(t, "RUNNING") for t in "abc"]
  for trial in trials:
    view.on_trial_start(0, trials, trial)
    view.on_trial_result(0, trials, trial, {"ema_accuracy": 0.9, "step": 20,
                                            "steps_total": 20})
    view.on_trial_complete(0, trials, trial)
  view.on_trial_error(0, trials, trials[0])
  view.on_step_end(0, trials)
  [line] = stream.getvalue().splitlines()  # One line, whatever K is.
  assert "stay secret" in line and "0.9" not in line
