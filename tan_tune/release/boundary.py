"""The private-run boundary: what every run that claims an epsilon goes through.

Three paths print an epsilon as a guarantee: a promotion, each trial of a
private random search, and `tan-tune train` of a private config. Each publishes
only what its accountant covers (weights, held-out accuracy, epsilon with its
accountant, adjacency, sampler and delta), so each runs inside `private_run`,
which does in one place what used to be repeated, or forgotten, per path:

- **The ledger charge, before anything trains** (`charge.py`, the one
  charge protocol of every private run): refused when the dataset's budget
  has no room, or when the store has never seen the dataset and the user did
  not say `--new-ledger`.
- **Owner-only files.** The process's umask becomes 077 for the run (files
  0600, folders 0700), in the driver and, through `worker_setup`, in every Ray
  worker; Ray's copies of checkpoints, its experiment state and its logs
  inherit it. A search of simulated trials is owner-only too: its files are
  its user's, though they hold nothing secret.
- **A private temp root.** Temp folders of the run (a worker's checkpoint
  folder, `worker_folder`) live under `tan_tune-<key>` in the temp dir; when
  Ray is started here, TMPDIR points at an owner-only root, and Ray's whole
  session folder (logs with trial names and timestamps, its staging of
  results) lives one level inside it: Ray makes its own folders 0777, but
  nobody else can traverse the 0700 root. It goes at the end; a root a killed
  run left behind goes at the next start (a live run holds its root's lock).
  On a cluster (`--address`), the run's temp folders go on every node, and
  Ray's own logs stay in the cluster's temp dir (docs/clusters.md says how
  to keep them owner-only). A Ray already started in this process (a
  notebook's `ray.init()`) is refused unless other users cannot reach its
  session folder, judged where its path resolves (`exposure.py`). A
  resumed run clears what a killed worker left first.
- **Few, coarse reports.** At most about 100 evaluations
  (`trial_config.private_eval_every`), each logged at the run's start time
  rather than the wall clock of its step (`promote/worker.py`): a step's
  duration grows with its realised batch size |B_t|, which is secret.

The secret sampling, noise and dropout seeds are the trainer's own
(`training/seeds.py`), and so is the allow-list of what a private run
reports (`run_state.PRIVATE_METRICS`).
"""

import contextlib
import dataclasses
import fcntl
import hashlib
import os
import pathlib
import shutil
import stat
import sys
import tempfile
from typing import Iterator

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from tan_tune import ray_cluster
from tan_tune.errors import ConfigError
from tan_tune.release import exposure

# Where it resolves, as every exposure check (`exposure.py`).
reachable_by_others = exposure.reachable_by_others

OWNER_ONLY_UMASK = 0o077
# A run's temp root, tan_tune_XXXXXXXX, and Ray's temp dir inside it.
ROOT_PREFIX = "tan_tune_"
RAY_FOLDER = "ray"
# The longest temp dir that leaves room for Ray's socket paths (107 bytes):
# <dir>/tan_tune_XXXXXXXX/ray/session_<date>_<time>_<us>_<pid>/sockets/
# plasma_store is <dir> and 18 + 4 + 42 (a 7-digit pid) + 21 bytes.
_LONGEST_TEMP_DIR = 22
_FOLDER_PREFIX = "tan_tune-"


def worker_setup() -> None:
  """In a Ray worker of a private run: whatever it writes is owner-only, and
  it writes no bytecode (`owner_only_files`)."""
  os.umask(OWNER_ONLY_UMASK)
  sys.dont_write_bytecode = True


def worker_folder(key: str) -> pathlib.Path:
  """A fresh owner-only folder for one worker's checkpoints, under the
  run's `tan_tune-<key>` folder of this node's temp dir.

  Raises:
    ConfigError: that folder was there already, and is a link, another
      user's, or one other users can reach where it resolves.
  """
  parent = pathlib.Path(tempfile.gettempdir()) / f"{_FOLDER_PREFIX}{key}"
  parent.mkdir(mode=0o700, parents=True, exist_ok=True)
  if (parent.is_symlink() or parent.stat().st_uid != os.getuid()
      or reachable_by_others(parent)):
    raise ConfigError(
        "temp folder", str(parent),
        "a folder of this run's only (0700, yours, not a link), where its"
        " workers keep their checkpoints: remove this one, which another"
        " user or program made or opened")
  return pathlib.Path(tempfile.mkdtemp(dir=parent))


@contextlib.contextmanager
def owner_only_files() -> Iterator[None]:
  """Files made inside are 0600 and folders 0700 (umask 077); the
  commands open their logs in it, before the run's boundary. No bytecode is
  written inside: a module first imported mid-run (a team's factory, a
  loader) would leave a `__pycache__` beside its source dated by the run."""
  previous = os.umask(OWNER_ONLY_UMASK), sys.dont_write_bytecode
  sys.dont_write_bytecode = True
  try:
    yield
  finally:
    os.umask(previous[0])
    sys.dont_write_bytecode = previous[1]


@dataclasses.dataclass(frozen=True)
class PrivateRun:
  """A run inside the boundary.

  Attributes:
    key: names its temp folders on every node (a search or promotion id).
    root: the owner-only temp root; Ray's temp dir is `root / RAY_FOLDER`
      when Ray starts here.
  """

  key: str
  root: pathlib.Path


@contextlib.contextmanager
def private_run(key: str, address: str | None = None, use_ray: bool = True,
                secret: bool = True) -> Iterator[PrivateRun]:
  """The boundary around one run, connected to Ray (`ray_cluster.connect`)
  unless `use_ray` is False; `secret=False` (a search of simulated trials,
  which keeps nothing secret) may use whatever Ray this process started.

  Raises:
    ConfigError: no Ray cluster answers at `address`; a secret run on a Ray
      already started in this process whose session other users can reach.
  """
  if use_ray and secret:
    require_private_ray(address)
  with owner_only_files(), _temp_root(
      use_ray and not ray.is_initialized()) as (root, ours):
    try:
      if use_ray:
        ray_cluster.connect(address, str(root / RAY_FOLDER) if ours else None)
        remove_on_every_node(key)  # What killed workers left.
      yield PrivateRun(key, root)
    finally:
      if use_ray:
        remove_on_every_node(key)
      if ours:
        ray_cluster.disconnect()


def require_private_ray(address: str | None) -> None:
  """Refuses a Ray already started in this process (a notebook's
  `ray.init()`) whose session folder other users can reach: its workers'
  logs there name the trials. A cluster named by `address` or RAY_ADDRESS is
  left to its own set-up (docs/clusters.md).

  Raises:
    ConfigError: that Ray's session folder is reachable by other users.
  """
  if not ray.is_initialized() or ray_cluster.resolve_address(address)[0]:
    return
  node = ray._private.worker._global_node  # pylint: disable=protected-access
  if node is None:  # A Ray client: its session is on another machine.
    why = "its session folder cannot be checked from here"
  else:
    session = pathlib.Path(node.get_session_dir_path())
    if not reachable_by_others(session):
      return
    real = exposure.resolved(session)
    where = session if real == session else f"{session} (at {real})"
    why = f"its session folder {where} is readable by other users"
  raise ConfigError(
      "ray", "already started in this process",
      f"a private run cannot use it: {why}. Call ray.shutdown() first (the"
      " run then starts its own, owner-only), or pass address= a cluster"
      " set up as docs/clusters.md says")


@contextlib.contextmanager
def _temp_root(for_ray: bool) -> Iterator[tuple[pathlib.Path, bool]]:
  """An owner-only temp root, locked while the run lives and removed at the
  end; with `for_ray`, TMPDIR points there, for the workers' temp folders,
  and Ray keeps its session folder in `RAY_FOLDER` inside. Ray's sockets
  live in that folder and a socket's path has at most 107 bytes, so a long
  temp dir gives way to /tmp. torch's compiler cache (made the first time
  a process loads torch._dynamo, as torch.export does) is kept there too:
  made in the shared temp dir mid-run, its folder's time would date the run."""
  parent = pathlib.Path(tempfile.gettempdir())
  if len(str(parent)) > _LONGEST_TEMP_DIR:
    parent = pathlib.Path("/tmp")
  remove_leftovers(parent)
  root, lock = _locked_root(parent)
  saved = (os.environ.get("TMPDIR"), os.environ.get("TORCHINDUCTOR_CACHE_DIR"),
           tempfile.tempdir)
  os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(root / "torchinductor")
  if for_ray:
    os.environ["TMPDIR"] = str(root)
    tempfile.tempdir = None  # Read TMPDIR again.
  try:
    yield root, for_ray
  finally:
    os.environ.update({name: value for name, value in zip(
        ("TMPDIR", "TORCHINDUCTOR_CACHE_DIR"), saved) if value is not None})
    if saved[0] is None:
      os.environ.pop("TMPDIR", None)
    if saved[1] is None:
      os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
    tempfile.tempdir = saved[2]
    shutil.rmtree(root, ignore_errors=True)
    os.close(lock)


def remove_leftovers(parent: pathlib.Path) -> None:
  """Removes this user's temp roots in `parent` that no run holds: a live
  run holds its root's lock, a killed run's lock went with its process."""
  for root in parent.glob(f"{ROOT_PREFIX}*"):
    try:
      info = root.lstat()
      if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        continue
      lock = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
      continue  # Gone meanwhile.
    try:
      if _lock(lock):
        shutil.rmtree(root, ignore_errors=True)
    finally:
      os.close(lock)


def _locked_root(parent: pathlib.Path) -> tuple[pathlib.Path, int]:
  """A new 0700 root in `parent` and the descriptor holding its lock."""
  while True:
    root = pathlib.Path(tempfile.mkdtemp(prefix=ROOT_PREFIX, dir=parent))
    lock = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    # Another run's start may have swept the root before it was locked.
    with contextlib.suppress(FileNotFoundError):
      if _lock(lock) and os.stat(root).st_ino == os.fstat(lock).st_ino:
        return root, lock
    os.close(lock)


def _lock(descriptor: int) -> bool:
  """Takes the folder's lock, unless a live run holds it."""
  try:
    fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except BlockingIOError:
    return False
  return True


def run_key(kind: str, folder: pathlib.Path) -> str:
  """A run's key from its state folder: the same when it is resumed."""
  digest = hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:16]
  return f"{kind}-{digest}"


def remove_on_every_node(key: str) -> None:
  """Removes the run's temp folders on every alive node. A node that died
  since Ray listed it is skipped: its folders are owner-only, and nothing
  can reach them through the cluster any more."""
  if not ray.is_initialized():
    return
  removals = [
      _remove_here.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
          node["NodeID"], soft=False)).remote(key)
      for node in ray.nodes() if node["Alive"]]
  for removal in removals:
    try:
      ray.get(removal)
    except (ray.exceptions.TaskUnschedulableError,
            ray.exceptions.NodeDiedError, ray.exceptions.WorkerCrashedError):
      pass


@ray.remote(num_cpus=0)
def _remove_here(key: str) -> None:
  shutil.rmtree(pathlib.Path(tempfile.gettempdir()) / f"{_FOLDER_PREFIX}{key}",
                ignore_errors=True)
