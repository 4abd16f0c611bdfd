"""The search's live view: a few lines instead of Ray Tune's tables.

A Ray Tune callback in the driver counts the trials by state (running,
finished, pruned by ASHA, failed), keeps the best value so far with its
hyper-parameters, and estimates the time left from the trials done; it hands
the lines to the command's `console.active()` console, which refreshes them
in place on a terminal and prints each change once elsewhere. Without one
(tests, library use) it shows nothing.
"""

import time
from typing import Any

from ray import tune

from tan_tune import console as console_lib
from tan_tune.search.tracking import format_params


def stopped_early(result: dict[str, Any]) -> bool:
  """A trial's last result before its last step: ASHA pruned it."""
  return result.get("step", 0) < result.get("steps_total", 0)


class SearchProgress(tune.Callback):
  """Counts, best so far and time left, on every trial event (and every
  second on a terminal)."""

  def __init__(self, name: str, metric: str, mode: str, num_trials: int):
    self.name, self.metric, self.mode = name, metric, mode
    self.num_trials = num_trials
    self.start = time.monotonic()
    self.best: tuple[float, str, dict[str, Any]] | None = None
    # Ray calls on_trial_complete before it marks the trial TERMINATED.
    self._ended: dict[str, str] = {}
    self._last_tick = 0.0

  def __setstate__(self, state):
    # Restored with a resumed search: time starts again.
    self.__dict__.update(state, start=time.monotonic())

  def on_trial_result(self, iteration, trials, trial, result, **info):
    value = result.get(self.metric)
    if value is None or stopped_early(result):
      return
    if self.best is None or (value > self.best[0] if self.mode == "max"
                             else value < self.best[0]):
      self.best = (value, trial.trial_id, dict(trial.config))
      self._show(trials)

  def on_trial_start(self, iteration, trials, trial, **info):
    if self._live():  # Off a terminal, a line per trial done is enough.
      self._show(trials)

  def on_trial_complete(self, iteration, trials, trial, **info):
    self._ended[trial.trial_id] = ("pruned" if stopped_early(trial.last_result or {})
                                   else "finished")
    self._show(trials)

  def on_trial_error(self, iteration, trials, trial, **info):
    self._ended[trial.trial_id] = "failed"
    console = console_lib.active()
    if console:
      console.line(f"trial {trial.trial_id} failed; its error is in the log")
    self._show(trials)

  def on_step_end(self, iteration, trials, **info):
    now = time.monotonic()
    if self._live() and now - self._last_tick >= 1.0:
      self._last_tick = now
      self._show(trials)

  def _live(self) -> bool:
    console = console_lib.active()
    return bool(console and console.live)

  def _show(self, trials) -> None:
    console = console_lib.active()
    if console is None:
      return
    counts = {"running": 0, "finished": 0, "pruned": 0, "failed": 0}
    for trial in trials:
      if trial.trial_id in self._ended:
        counts[self._ended[trial.trial_id]] += 1
      elif trial.status == "RUNNING":
        counts["running"] += 1
      elif trial.status == "ERROR":  # Ended before a resume.
        counts["failed"] += 1
      elif trial.status == "TERMINATED":
        counts["pruned" if stopped_early(trial.last_result or {})
               else "finished"] += 1
    done = counts["finished"] + counts["pruned"] + counts["failed"]
    elapsed = time.monotonic() - self.start
    left = ""
    if 0 < done < self.num_trials:
      remaining = elapsed / done * (self.num_trials - done)
      left = f", about {console_lib.duration(remaining)} left"
    lines = [f"search {self.name}: {done}/{self.num_trials} trials done"
             f" ({counts['finished']} finished, {counts['pruned']} pruned,"
             f" {counts['failed']} failed), {counts['running']} running;"
             f" {console_lib.duration(elapsed)}{left}"]
    if self.best:
      value, trial_id, params = self.best
      lines.append(f"  best {self.metric} so far {value:.4f}: trial"
                   f" {trial_id} ({format_params(params)})")
    console.status(*lines)


class SecretSearchProgress(SearchProgress):
  """A private random search's view: one line at the start, nothing more.
  The number of trials and their results are what its accounting keeps
  secret, so no event of a trial shows (a line per trial done would count
  them), and no clock: the last time shown would be the search's duration,
  which counts them too."""

  def __init__(self, name: str):
    super().__init__(name, metric="", mode="max", num_trials=0)
    self._started = False

  def on_trial_start(self, iteration, trials, trial, **info):
    if not self._started:
      self._started = True
      self._show(trials)

  def on_trial_result(self, iteration, trials, trial, result, **info):
    pass

  def on_trial_complete(self, iteration, trials, trial, **info):
    pass

  def on_trial_error(self, iteration, trials, trial, **info):
    pass  # Which trial failed, and why, stays in the log.

  def on_step_end(self, iteration, trials, **info):
    pass

  def _show(self, trials) -> None:
    console = console_lib.active()
    if console:
      console.status(
          f"private random search {self.name}: running; how many trials,"
          " how long, and how they did stay secret: the best alone is"
          " released at the end")
