"""Real multi-node Ray on one machine: a head and worker nodes, each its own
`ray start` process tree, with fake GPUs; tan-tune joins with --address.

The head advertises no CPU, as in cluster/: it runs only drivers, so every
trial and training worker lands on a worker node.
"""

import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import time

from mlflow import MlflowClient
import pytest
import yaml

import mlflow_stores
import promote_processes
from tan_tune import mlflow_store
from tan_tune.search import driver as search
from tan_tune.search import search_files
from tan_tune.search import tracking

# Clusters of several Ray nodes on this machine.
pytestmark = [pytest.mark.e2e, pytest.mark.multinode]

DEMO = pathlib.Path(__file__).resolve().parents[2] / "search_spaces" / "digits-demo.yaml"
RAY = str(pathlib.Path(sys.executable).parent / "ray")
ENV = dict(os.environ, RAY_AUTH_MODE="disabled", PYTHONUNBUFFERED="1")


# Every port `_free_ports` handed out: a node binds its ports seconds after
# they were chosen, so the next node's choice must not reuse them (once, a
# worker's runtime-env agent was given the head's object-manager port, and
# the worker's raylet died with it).
_HANDED_OUT: set[int] = set()


def _free_ports(count):
  """`count` ports free now, all different and none handed out before: held
  open together, as the OS may hand a port it just freed to the next bind."""
  sockets, ports = [], []
  try:
    while len(ports) < count:
      sockets.append(socket.socket())
      sockets[-1].bind(("127.0.0.1", 0))
      port = sockets[-1].getsockname()[1]
      if port not in _HANDED_OUT:
        ports.append(port)
  finally:
    for s in sockets:
      s.close()
  _HANDED_OUT.update(ports)
  return ports


def _descendants(pid):
  """pid and every process below it (Ray's workers start their own groups)."""
  children = {}
  for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
    try:
      fields = stat.read_text().rsplit(")", 1)[1].split()
    except OSError:
      continue
    children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
  found, todo = [], [pid]
  while todo:
    current = todo.pop()
    found.append(current)
    todo.extend(children.get(current, []))
  return found


class LocalCluster:
  """`ray start --block` processes on 127.0.0.1: one head, worker nodes."""

  def __init__(self, folder):
    self.folder = folder
    self.nodes = []
    self.cpus = 0
    self._start(["--head", "--num-cpus", "0", "--include-dashboard", "false"],
                head=True)

  def _start(self, args, head=False):
    """Starts a node; the head's port becomes the cluster's address."""
    flags = ["--node-manager-port", "--object-manager-port",
             "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port",
             "--runtime-env-agent-port", "--metrics-export-port"]
    if head:
      flags.insert(0, "--port")
    ports = _free_ports(len(flags))  # Several nodes share one host.
    if head:
      self.address = f"127.0.0.1:{ports[0]}"
    log = (self.folder / f"node{len(self.nodes)}.log").open("w")
    self.nodes.append(subprocess.Popen(
        [RAY, "start", "--block", "--disable-usage-stats",
         "--node-ip-address", "127.0.0.1",
         *[str(a) for pair in zip(flags, ports) for a in pair], *args],
        env=ENV, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

  def add_nodes(self, count, cpus, gpus):
    """Starts `count` worker nodes, each once the one before has joined
    (started together, they time out registering on a loaded machine);
    their processes."""
    for _ in range(count):
      self._start(["--address", self.address, "--num-cpus", str(cpus),
                   "--num-gpus", str(gpus)])
      self.cpus += cpus
      self._wait_for(len(self.nodes))
    return self.nodes[-count:]

  def _wait_for(self, count):
    """Until `count` nodes are alive and the cluster's resource view counts
    all their CPUs (it lags behind on a loaded machine), asked through
    `ray status`."""
    deadline = time.time() + 120
    while time.time() < deadline:
      for index, node in enumerate(self.nodes):
        if node.poll() is not None:
          log = (self.folder / f"node{index}.log").read_text()
          raise RuntimeError(f"`ray start` of node {index} exited:\n{log[-3000:]}")
      status = subprocess.run([RAY, "status", "--address", self.address],
                              env=ENV, capture_output=True, text=True,
                              check=False).stdout
      active = status.split("Active:", 1)[-1].split("Pending:", 1)[0]
      cpus = re.search(r"/([0-9.]+) CPU", status)
      if (active.count("node_") >= count
          and cpus and float(cpus.group(1)) >= self.cpus):
        return
      time.sleep(1)
    raise TimeoutError(f"{count} nodes did not come up:\n{status}")

  def kill(self, node):
    """SIGKILLs a node's raylet and everything it started: a lost machine."""
    for pid in _descendants(node.pid):
      try:
        os.kill(pid, signal.SIGKILL)
      except ProcessLookupError:
        pass

  def shutdown(self):
    for node in reversed(self.nodes):
      self.kill(node)
      node.wait()
      # A `ray start` that failed has exited and left its raylet orphaned,
      # out of `kill`'s reach but still in the node's session.
      promote_processes.kill_session(node.pid)


@pytest.fixture
def cluster(tmp_path):
  local = LocalCluster(tmp_path)
  yield local
  local.shutdown()


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
  """A head and two worker nodes of one CPU and one (fake) GPU each, started
  once for the tests that need two nodes; the lost-node test, which kills
  one, is the last of them."""
  local = LocalCluster(tmp_path_factory.mktemp("two_nodes"))
  try:  # Stopped even when a node fails to start.
    yield local, local.add_nodes(2, cpus=1, gpus=1)
  finally:
    local.shutdown()


def _space(tmp_path, name, steps=20, **overrides):
  space = yaml.safe_load(DEMO.read_text())
  space.update({"name": name, "num_trials": 4, "eval_every": 10, **overrides})
  # The demo's budget, eps = 2, holds sigma = 6 to 60 steps; these runs may
  # take 300, within eps = 8 (3.83).
  space["reference"].update(steps=steps, noise_multiplier=6.0,
                            target_epsilon=8)
  path = tmp_path / f"{name}.yaml"
  path.write_text(yaml.safe_dump(space))
  return path


def _tan_tune(*args, timeout=600):
  done = subprocess.run([sys.executable, "-m", "tan_tune.cli", *args], env=ENV,
                        capture_output=True, text=True, timeout=timeout,
                        check=False)
  assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
  return done.stdout + done.stderr


def _finished_children(uri, name):
  client = MlflowClient(uri)
  experiment = client.get_experiment_by_name(name)
  return [r for r in client.search_runs([experiment.experiment_id])
          if r.data.tags.get(mlflow_store.KIND_TAG) == "trial"
          and r.data.tags.get(mlflow_store.STATUS_TAG) == "finished"]


def test_quarter_gpu_trials_run_four_at_a_time(cluster, tmp_path):
  cluster.add_nodes(1, cpus=8, gpus=1)
  # 200 steps: long enough for four trials to overlap even when starting
  # each takes seconds on a loaded machine (with 20, and once with 60 on a
  # clean clone's loaded CI, one ended before the fourth began).
  # Five trials: one more than the GPU holds, so a fifth waits only for it.
  space = _space(tmp_path, "packed", steps=200, num_trials=5,
                 max_concurrent=8, resources={"cpu": 0.5, "gpu": 0.25})
  uri = mlflow_stores.new_store(tmp_path)
  _tan_tune("search", str(space), "--address", cluster.address,
            "--storage", str(tmp_path / "runs"), "--tracking-uri", uri)
  # The CPUs allow 16 at a time and the search 8: the GPU allows 4.
  children = _finished_children(uri, "packed")
  assert len(children) == 5 and _most_at_once(children) == 4


def _most_at_once(runs):
  """The most runs open at the same time, from their MLflow start and end."""
  events = sorted([(r.info.start_time, 1) for r in runs] +
                  [(r.info.end_time, -1) for r in runs])  # An end goes first.
  open_runs = [0]
  for _, change in events:
    open_runs.append(open_runs[-1] + change)
  return max(open_runs)


def test_search_spreads_over_nodes_and_promote_uses_two(two_nodes, tmp_path):
  cluster, _ = two_nodes
  storage, uri = tmp_path / "runs", mlflow_stores.new_store(tmp_path)
  # Two trials of 40 steps: long enough that they overlap even when the
  # driver is slow to start the second, so each needs a node's one CPU.
  _tan_tune("search", str(_space(tmp_path, "spread", steps=40, num_trials=2)),
            "--address", cluster.address, "--storage", str(storage),
            "--tracking-uri", uri)
  leaderboard = json.loads(
      (storage / "spread" / search_files.LEADERBOARD_FILE).read_text())
  assert [row["status"] for row in leaderboard] == ["finished"] * 2
  assert len({row["node_id"] for row in leaderboard}) == 2  # Both workers.
  assert len(_finished_children(uri, "spread")) == 2

  # One CPU per node and per training worker: the two ranks are on two nodes.
  out = _tan_tune("promote", str(storage / "spread"), "--workers", "2",
                  "--address", cluster.address, "--new-ledger")
  assert "promoted run finished (private)" in out
  client = MlflowClient(uri)
  [promoted] = client.search_runs(
      [client.get_experiment_by_name("spread").experiment_id],
      filter_string=f"tags.`{mlflow_store.KIND_TAG}` = 'promoted'")
  nodes = promoted.data.tags["tan_tune.worker_node_ids"].split(",")
  assert len(nodes) == 2 and nodes[0] != nodes[1]
  # Ray Train ranks nodes by IP, and every node here has this machine's.


def test_a_lost_node_mid_search_retries_its_trials_elsewhere(two_nodes,
                                                             tmp_path):
  cluster, (_, doomed) = two_nodes
  storage, uri = tmp_path / "runs", mlflow_stores.new_store(tmp_path)
  # Long enough to kill a node while both first trials run: on a fast
  # machine 100 steps took under 2 s, and the kill landed as a finished
  # trial's cached actor there was handed to the third trial. Ray Tune 2.60
  # then counts the dead actor's two calls as two failures, the second while
  # the trial waits to be retried, and errs it.
  steps = 300
  space = _space(tmp_path, "lost", steps=steps)
  log = (tmp_path / "search.log").open("w")
  driver = subprocess.Popen(
      [sys.executable, "-m", "tan_tune.cli", "search", str(space),
       "--address", cluster.address, "--storage", str(storage),
       "--tracking-uri", uri], env=ENV, stdout=log, stderr=subprocess.STDOUT)
  tune_dir = storage / "lost" / "tune"
  deadline = time.time() + 300
  while time.time() < deadline and driver.poll() is None:
    # Both first trials have a checkpoint that the driver has registered (it
    # wrote the result that carried it): one of them is on the doomed node.
    # A checkpoint in storage that the driver has not yet registered would
    # not be restored, and the trial would rightly start again from step 0.
    if len(_registered_checkpoints(tune_dir)) >= 2:
      break
    time.sleep(0.2)
  assert driver.poll() is None, (tmp_path / "search.log").read_text()[-3000:]
  cluster.kill(doomed)
  assert driver.wait(timeout=900) == 0, (
      (tmp_path / "search.log").read_text()[-4000:])

  analysis = search.tune.ExperimentAnalysis(str(tune_dir))
  assert sorted(t.status for t in analysis.trials) == ["TERMINATED"] * 4
  retried = [t for t in analysis.trials if t.num_failures >= 1]
  assert retried  # The lost node's trial failed ...
  for trial in retried:
    results = [json.loads(line)
               for line in (pathlib.Path(trial.path) / "result.json").open()]
    lost_node = results[0]["node_id"]
    restarts = [r for r in results[1:] if r["iterations_since_restore"] == 1]
    assert restarts  # ... and ran again, on the other node, from a checkpoint.
    assert all(r["node_id"] != lost_node and r["step"] > 10 for r in restarts), (
        lost_node, restarts)
    # Ray may redo the steps since the checkpoint it restores; the resume is
    # exact, so a step reported twice reports the same model.
    accuracy = {}
    for result in results:
      accuracy.setdefault(result["step"], set()).add(result["ema_accuracy"])
    assert max(accuracy) == steps and all(
        len(a) == 1 for a in accuracy.values())
  children = _finished_children(uri, "lost")
  assert len(children) == 4  # Each trial is in MLflow once.
  assert len({c.data.tags[tracking.TRIAL_ID_TAG] for c in children}) == 4


def _registered_checkpoints(tune_dir: pathlib.Path) -> set[pathlib.Path]:
  """Trials with a checkpoint in storage and a result the driver logged."""
  return {trial for trial in tune_dir.glob("train_trial_*")
          if list(trial.glob("checkpoint_*"))
          and (trial / "result.json").exists()
          and (trial / "result.json").read_text().strip()}
