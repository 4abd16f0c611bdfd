"""Shared fixtures: one local Ray per test session (a cold start costs ~5 s),
and finished search directories written by hand for promotion tests.

The tests sit like the package: one folder per stage (`core/` for the
root's modules, then `privacy/` up to `cli/`), `e2e/` for whole runs across
stages, `project/` for the repository's own checks (layout, docs, cluster
configs, examples, benchmarks) and `extensions/` for a sampler, a tuning
strategy and a model family added as a user would. Their shared helpers
(this folder's other modules) are importable from every folder.

The suite is in tiers (markers in pyproject.toml): `make check` leaves out
the end-to-end, Ray, multi-node, browser, slow and team-server tests; `make
test` (CI) runs them all, on two pytest-xdist workers, each test file on one of them
(`--dist loadfile`: a module's shared results are computed once). A test
that uses the session's Ray is marked `ray` here, one that uses the team's
server `team`."""

import contextlib
import json
import os
import pathlib
import shutil
import tempfile

import pytest
import yaml

import mlflow_stores
import team_server as team_server_lib

DIGITS_N = 1437  # The bundled digits' training set.

# Token auth is Ray 2.60's default for a new local cluster; tests need none.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def pytest_configure(config):
  del config
  workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
  if workers > 1:
    # Each xdist worker gets its share of the cores: torch's default of one
    # thread per core in every worker oversubscribes them, and its spinning
    # threads then slow each other down several times over.
    import torch  # pylint: disable=g-import-not-at-top
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


def pytest_collection_modifyitems(items):
  for item in items:
    fixtures = getattr(item, "fixturenames", ())
    if "local_ray" in fixtures:
      item.add_marker(pytest.mark.ray)
    if "team_server" in fixtures:
      item.add_marker(pytest.mark.team)
  # The heaviest files first (`make test` hands files out in this order,
  # --no-loadscope-reorder): end-to-end files are four fifths of the suite's
  # time in a dozen files of a few long tests each. Handed out last, as
  # xdist's default (most tests first) does, one of them ran on alone while
  # the other worker sat idle; first, the many short files fill the end.
  weights = {}
  for item in items:
    weights[item.path] = min(weights.get(item.path, 2), _weight(item))
  # Stable: each file keeps its own order (pytest's, which spares fixtures).
  items.sort(key=lambda item: weights[item.path])


def _weight(item: pytest.Item) -> int:
  """0 for a multi-node test, 1 for another end-to-end one (the team's
  server's too), 2 for the rest; a file weighs what its heaviest test does."""
  marks = {mark.name for mark in item.iter_markers()}
  return 0 if "multinode" in marks else 1 if marks & {"e2e", "team"} else 2


@pytest.fixture(scope="session")
def local_ray():
  import ray  # pylint: disable=g-import-not-at-top

  # "local": a new instance, never a cluster another test (or `ray start`)
  # left a record of in /tmp/ray. Its session folder (0777) lies inside an
  # owner-only parent, as a private run's own Ray's does, so the private
  # flows of the tests may use it (`boundary.require_private_ray`).
  parent = tempfile.mkdtemp(prefix="ray_tests_", dir="/tmp")
  ray.init(address="local", num_cpus=2, include_dashboard=False,
           log_to_driver=False, _temp_dir=os.path.join(parent, "ray"))
  yield
  ray.shutdown()
  shutil.rmtree(parent, ignore_errors=True)


@pytest.fixture(scope="module")
def team_server(tmp_path_factory):
  """A PostgreSQL-backed `mlflow server` with basic-auth (`team_server.py`),
  one per test file: a store's privacy ledger is shared by all who charge
  it, so one file's charges stay out of another's. The test skips, saying
  why, where PostgreSQL cannot be found or started."""
  with contextlib.ExitStack() as stack:
    try:
      server = stack.enter_context(
          team_server_lib.running(tmp_path_factory.mktemp("team_server")))
    except team_server_lib.Unavailable as reason:
      pytest.skip(f"no PostgreSQL for the team's server: {reason}")
    yield server


@pytest.fixture
def migrated_mlflow_db(tmp_path):
  """`tmp_path/mlflow.db`, a new MLflow store made in milliseconds
  (`mlflow_stores.py`); its URI. A module whose tests all use that store
  asks for it with `pytest.mark.usefixtures`."""
  return mlflow_stores.new_store(tmp_path)


class _Searches:
  """Writes what `tan-tune search` leaves on disk, without running one."""

  params = {"lr": 2.0, "momentum": 0.5, "dampening": 0.0, "ema_decay": 0.99,
            "augmentation": "none", "simulation_batch_size": 64}

  def row(self, trial_id, value, status="finished", **params):
    """A leaderboard row."""
    return {"trial_id": trial_id, "status": status,
            "ema_accuracy": value, "step": 100,
            "examples_per_second": 1000.0,
            "params": {**self.params, **params},
            "mlflow_run_id": f"run-{trial_id}"}

  def write(self, tmp_path, rows=None, space_fields=None, **reference):
    """A finished digits search directory; `reference` overrides B_ref etc.,
    `space_fields` the search file's other fields."""
    from tan_tune.privacy import triplet
    from tan_tune.search import resolved
    from tan_tune.search import search_files
    from tan_tune.search import space as search_space

    directory = tmp_path / "runs" / "digits"
    directory.mkdir(parents=True)
    space = {
        "name": "digits", "dataset": {"name": "digits"},
        "model": {"name": "small-cnn"},
        "reference": {"batch_size": 512, "noise_multiplier": 2.0555,
                      "steps": 100, "target_epsilon": 8, **reference},
        "simulation_batch_sizes": [32, 64],
        "hyperparameters": {"lr": {"kind": "loguniform", "low": 0.5,
                                   "high": 8}},
        "device": "cpu",
        **(space_fields or {}),
    }
    (directory / search_files.SPACE_FILE).write_text(yaml.safe_dump(space))
    (directory / search_files.STATE_FILE).write_text(json.dumps({
        "parent_run_id": "parent", "experiment_id": "1",
        "tracking_uri": f"sqlite:///{tmp_path}/mlflow.db"}))
    # As the search resolved it, unchecked: a test may write what a search
    # would refuse, to see promote refuse it too.
    loaded = search_space.load_search_space(directory / search_files.SPACE_FILE)
    resolved.save(resolved.ResolvedSearch(
        loaded, triplet.PrivacyTriplet(
            DIGITS_N, loaded.reference.batch_size,
            loaded.reference.noise_multiplier, loaded.reference.steps),
        loaded.reference.delta or 1 / DIGITS_N), directory)
    if rows is None:
      rows = [self.row("best", 0.96), self.row("next", 0.9)]
    (directory / search_files.LEADERBOARD_FILE).write_text(json.dumps(rows))
    winner = next((r for r in rows if r["status"] == "finished"), None)
    if winner:  # As a search writes it: none when no trial finished.
      (directory / search_files.BEST_FILE).write_text(
          json.dumps({"trial_id": winner["trial_id"]}))
    return directory


@pytest.fixture
def searches():
  return _Searches()


@pytest.fixture
def opened():
  """A folder every user of the machine may enter (0755, in /tmp): other
  users can `stat` what a test writes there. Removed after the test."""
  if not all(os.stat(parent).st_mode & 0o001 for parent in ("/", "/tmp")):
    pytest.skip("/tmp lets no other user through on this machine")
  folder = tempfile.mkdtemp(prefix="opened_", dir="/tmp")
  os.chmod(folder, 0o755)
  yield pathlib.Path(folder)
  shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def hidden_link(tmp_path, opened):
  """A link to `opened` in a 0700 folder: its own path goes through a
  folder no other user may enter, where it leads lets them in."""
  hidden = tmp_path / "hidden"
  hidden.mkdir(mode=0o700)
  link = hidden / "link"
  link.symlink_to(opened)
  return link
