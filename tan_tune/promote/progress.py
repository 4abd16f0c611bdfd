"""The promoted run's live view: its published metrics, read back from MLflow.

Ray Train's workers log each evaluation of the private run to its MLflow run
(step, held-out accuracy, epsilon: what the accountant covers and the run
publishes anyway). While `TorchTrainer.fit` blocks, a thread of the driver
reads them back and shows the steps done, the eps spent so far and the
accuracy at each evaluation on the command's console; no clock, since the
time of an evaluation would time the steps before it, and a step's time
grows with its secret batch size.
"""

import contextlib
import threading
from typing import Iterator

from mlflow import MlflowClient

from tan_tune import console as console_lib

POLL_SECONDS = 2.0


@contextlib.contextmanager
def follow_training(client: MlflowClient, run_id: str, steps: int,
                    metric: str, accountant: str) -> Iterator[None]:
  """Shows the run's evaluations while the body trains; nothing without a
  live console."""
  console = console_lib.active()
  if console is None:
    yield
    return
  stop = threading.Event()
  watcher = threading.Thread(
      target=_watch, daemon=True,
      args=(console, client, run_id, steps, metric, accountant, stop))
  watcher.start()
  try:
    yield
  finally:
    stop.set()
    watcher.join()


def _watch(console, client, run_id, steps, metric, accountant, stop) -> None:
  shown = 0
  while not stop.wait(POLL_SECONDS):
    try:
      epsilons = client.get_metric_history(run_id, "epsilon")
      scores = {m.step: m.value
                for m in client.get_metric_history(run_id, metric)}
    except Exception:  # pylint: disable=broad-except
      continue  # A busy store: the view waits for the next poll, never fails.
    before = shown
    for entry in sorted(epsilons, key=lambda m: m.step):
      if entry.step > shown and entry.step in scores:
        shown = entry.step
        console.line(f"  step {entry.step:,}/{steps:,}: {metric}"
                     f" {scores[entry.step]:.4f}, eps {entry.value:.3f} spent"
                     f" ({accountant.upper()})")
    if shown != before:
      console.status(f"private run: {shown:,}/{steps:,} steps evaluated")
