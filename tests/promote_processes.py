"""`tan-tune promote` as a process of its own, to kill it or its workers;
and any other server a test starts and must stop (`mlflow models serve`)."""

import contextlib
import os
import pathlib
import signal
import socket
import subprocess
import time


@contextlib.contextmanager
def running(promote_command, log_path, env=None):
  """promote (or another command) in its own session, printing to
  `log_path`; killed with its Ray (its workers) if still running at the
  end."""
  with log_path.open("w") as log:
    driver = subprocess.Popen(
        promote_command,
        env=dict(env or os.environ, PYTHONUNBUFFERED="1"),
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
  try:
    yield driver
  finally:
    if driver.poll() is None:
      os.killpg(driver.pid, signal.SIGKILL)
      driver.wait()


def wait_while_alive(driver, log_path, ready):
  """Returns once `ready()` holds; the driver must still be running."""
  deadline = time.time() + 600
  while time.time() < deadline and driver.poll() is None:
    if ready():
      break
    time.sleep(0.2)
  assert driver.poll() is None, log_path.read_text()[-3000:]


def train_worker_pids(session_id):
  """Ray Train workers started by the promote process in `session_id`."""
  return [pid for pid, command in _session(session_id)
          if "RayTrainWorker" in command]


def kill_session(session_id):
  """Kills every process of the session: the driver, its Ray and the Ray
  workers, which left alone would train on for a moment after the driver."""
  deadline = time.time() + 120
  while processes := _session(session_id):
    for pid, _ in processes:
      with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    assert time.time() < deadline, processes
    time.sleep(0.1)


def _session(session_id):
  """(pid, command line) of the live processes in `session_id`."""
  found = []
  for proc in pathlib.Path("/proc").iterdir():
    try:
      if (os.getsid(int(proc.name)) == session_id
          and (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"):
        found.append((int(proc.name), (proc / "cmdline").read_bytes().decode(
            errors="replace")))
    except (ValueError, OSError):
      continue
  return found


def free_port():
  """A TCP port on 127.0.0.1 nothing listens on now."""
  with socket.socket() as probe:
    probe.bind(("127.0.0.1", 0))
    return probe.getsockname()[1]
