"""A team's tracking server for tests: a real PostgreSQL in a temporary
folder and a real `mlflow server --app-name basic-auth` on it, artifacts
served by the server, everything on 127.0.0.1.

PostgreSQL comes from the machine (`make test` installs Debian's
`postgresql` as root, as it installs Chromium); where none can be found or
started, `running` raises `Unavailable` with the reason, and the tier skips.
PostgreSQL refuses to run as root: as root, the server runs as Debian's
`postgres` system user, in a folder it owns.

The logins are cluster/mlflow/'s own (`basic_auth.ini`, its database made
local): runs and MLflow's users live in PostgreSQL (databases `mlflow` and
`mlflow_auth`, superuser `mlflow`), the passwords come from the environment
(`PGPASSWORD`, `MLFLOW_AUTH_ADMIN_PASSWORD`), and every user may log to
every experiment (`default_permission = EDIT`): the team's ledger and
searches are experiments that everyone charges and logs to; deleting one,
or changing who may touch it, stays with its creator and the admin.
"""

import configparser
import contextlib
import dataclasses
import os
import pathlib
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Callable, Iterator

import psycopg
import requests

from promote_processes import free_port

RECIPE = pathlib.Path(__file__).parent.parent / "cluster" / "mlflow"
_DATABASE_USER = "mlflow"  # As in the recipe.
_SERVER_USER = "postgres"  # Debian's system user, for a server started as root.
_DEBIAN_BINARIES = pathlib.Path("/usr/lib/postgresql")
_READY_S = 300  # MLflow starts in ~10 s; far longer on a loaded machine.
_STOP_S = 30


class Unavailable(RuntimeError):
  """No PostgreSQL could be found or started here: why, for a skip."""


@dataclasses.dataclass(frozen=True)
class Credentials:
  """A login of the tracking server."""

  username: str
  password: str

  def env(self) -> dict[str, str]:
    """The variables through which MLflow's clients log in."""
    return {"MLFLOW_TRACKING_USERNAME": self.username,
            "MLFLOW_TRACKING_PASSWORD": self.password}


def postgres_binaries() -> pathlib.Path:
  """The folder of `initdb` and `postgres`: Debian's newest, else PATH's.

  Raises:
    Unavailable: none is installed.
  """
  def version(folder: pathlib.Path) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", folder.parent.name))

  debian = sorted(_DEBIAN_BINARIES.glob("*/bin"), key=version, reverse=True)
  on_path = shutil.which("initdb")
  for folder in [*debian, *([pathlib.Path(on_path).parent] if on_path else [])]:
    if (folder / "initdb").exists() and (folder / "postgres").exists():
      return folder
  raise Unavailable(
      "PostgreSQL's initdb and postgres were not found (in "
      f"{_DEBIAN_BINARIES}/*/bin or on PATH): `make test` installs Debian's "
      "postgresql as root; elsewhere, install PostgreSQL")


def _owner() -> pwd.struct_passwd | None:
  """The user PostgreSQL runs as: None for this one, unless it is root.

  Raises:
    Unavailable: root, and no system user to run PostgreSQL as.
  """
  if os.geteuid() != 0:
    return None
  try:
    return pwd.getpwnam(_SERVER_USER)
  except KeyError:
    raise Unavailable(
        f"PostgreSQL refuses to run as root and there is no {_SERVER_USER!r} "
        "user to run it as (Debian's postgresql package makes one)") from None


def _tail(path: pathlib.Path, chars: int = 3000) -> str:
  return path.read_text(errors="replace")[-chars:] if path.exists() else ""


def _wait(ready: Callable[[], bool], process: subprocess.Popen,
          log_path: pathlib.Path, what: str,
          exception: type[Exception]) -> float:
  """Waits, at most `_READY_S`, until `ready()`; the seconds it took.

  Raises:
    exception: `process` exited first, or the time ran out.
  """
  start = time.monotonic()
  while not ready():
    if process.poll() is not None:
      raise exception(f"{what} exited with status {process.returncode}:\n"
                      f"{_tail(log_path)}")
    if time.monotonic() - start > _READY_S:
      raise exception(f"{what} not ready after {_READY_S} s:\n"
                      f"{_tail(log_path)}")
    time.sleep(0.2)
  return time.monotonic() - start


def _stop(process: subprocess.Popen | None, first: signal.Signals) -> None:
  """Sends `first` to the process's group, then SIGKILL if it outlives
  `_STOP_S`; returns once it has exited."""
  if process is None or process.poll() is not None:
    return
  with contextlib.suppress(ProcessLookupError):
    os.killpg(process.pid, first)
  try:
    process.wait(_STOP_S)
  except subprocess.TimeoutExpired:
    with contextlib.suppress(ProcessLookupError):
      os.killpg(process.pid, signal.SIGKILL)
    process.wait(_STOP_S)


class Postgres:
  """A PostgreSQL server of its own, in a new folder; `stop` removes both."""

  def __init__(self) -> None:
    self._binaries = postgres_binaries()
    owner = _owner()
    # As that user and group alone: none of root's groups.
    self._as_owner = dict(user=owner.pw_uid, group=owner.pw_gid,
                          extra_groups=[]) if owner else {}
    # Under /tmp, not pytest's owner-only tmp_path: the server's user must
    # reach its folder.
    self.folder = pathlib.Path(tempfile.mkdtemp(prefix="tan_tune_pg_"))
    self.port = free_port()
    self.password = secrets.token_hex(16)
    self._process: subprocess.Popen | None = None

  def start(self) -> None:
    """Makes the cluster and starts the server.

    Raises:
      Unavailable: initdb failed, or the server did not start.
    """
    password_file = self.folder / "password"
    password_file.write_text(self.password)
    if self._as_owner:
      for path in (self.folder, password_file):
        os.chown(path, self._as_owner["user"], self._as_owner["group"])
    log_path = self.folder / "postgres.log"
    data = self.folder / "data"
    initdb = subprocess.run(
        [self._binaries / "initdb", "-D", data, "-U", _DATABASE_USER, "-E",
         "UTF8",
         "--auth=scram-sha-256", f"--pwfile={password_file}", "--no-sync"],
        **self._as_owner, capture_output=True, text=True, timeout=120,
        check=False)
    if initdb.returncode:
      raise Unavailable(f"initdb failed:\n{initdb.stdout}{initdb.stderr}")
    with log_path.open("w") as log:
      # The postmaster itself, in a session of its own: `stop` signals it.
      # fsync off: a test's server never outlives a crash of its machine.
      self._process = subprocess.Popen(
          [self._binaries / "postgres", "-D", data, "-h", "127.0.0.1",
           "-p", str(self.port), "-k", self.folder, "-c", "fsync=off"],
          **self._as_owner, stdout=log, stderr=subprocess.STDOUT,
          start_new_session=True)
    _wait(self._accepts, self._process, log_path, "PostgreSQL", Unavailable)

  def uri(self, database: str) -> str:
    """`database`'s SQLAlchemy URI, as the recipe writes it: the driver
    named (a bare `postgresql://` means psycopg2 to SQLAlchemy 2.0, psycopg
    to 2.1), no password (libpq reads `PGPASSWORD`)."""
    return (f"postgresql+psycopg://{_DATABASE_USER}@127.0.0.1:{self.port}/"
            f"{database}")

  def create_database(self, name: str) -> None:
    with self._connect() as connection:
      connection.execute(f'CREATE DATABASE "{name}"')

  def empty_store(self) -> None:
    """Empties MLflow's store, as on a fresh server: every experiment, run
    and registered model, and all that hangs off them (users stay)."""
    with self._connect("mlflow") as connection:
      connection.execute(
          "TRUNCATE experiments, runs, registered_models CASCADE")

  def _connect(self, database: str = "postgres") -> psycopg.Connection:
    return psycopg.connect(host="127.0.0.1", port=self.port, dbname=database,
                           user=_DATABASE_USER, password=self.password,
                           connect_timeout=5, autocommit=True)

  def _accepts(self) -> bool:
    try:
      self._connect().close()
    except psycopg.OperationalError:
      return False
    return True

  def stop(self) -> None:
    """SIGQUIT, PostgreSQL's immediate shutdown (its backends go with it);
    then the folder goes."""
    _stop(self._process, signal.SIGQUIT)
    shutil.rmtree(self.folder, ignore_errors=True)


class MlflowServer:
  """`mlflow server --app-name basic-auth` as a process group of its own."""

  def __init__(self, folder: pathlib.Path, postgres: Postgres,
               admin: Credentials, workers: int) -> None:
    self.port = free_port()
    self.tracking_uri = f"http://127.0.0.1:{self.port}"
    self.log_path = folder / "mlflow-server.log"
    self._command = [
        sys.executable, "-m", "mlflow", "server", "--app-name", "basic-auth",
        "--backend-store-uri", postgres.uri("mlflow"),
        "--artifacts-destination", str(folder / "artifacts"),
        "--serve-artifacts", "--host", "127.0.0.1", "--port", str(self.port),
        "--workers", str(workers)]
    self._env = dict(
        os.environ, PGPASSWORD=postgres.password,
        MLFLOW_AUTH_CONFIG_PATH=str(_auth_config(
            folder, postgres.uri(_auth_database()))),
        MLFLOW_AUTH_ADMIN_PASSWORD=admin.password,
        # The basic-auth app refuses to start without a static key (CSRF).
        MLFLOW_FLASK_SERVER_SECRET_KEY=secrets.token_hex(16),
        # MLflow's GenAI job runner: a dozen processes a tracking server of
        # runs has no use for.
        MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false",
        PYTHONUNBUFFERED="1")
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_USERNAME",
                 "MLFLOW_TRACKING_PASSWORD"):
      self._env.pop(name, None)
    self._process: subprocess.Popen | None = None

  def start(self) -> float:
    """Starts the server on its port, the same each time; the seconds until
    it answers.

    Raises:
      RuntimeError: it exited or did not answer in time (its log's tail).
    """
    assert self._process is None or self._process.poll() is not None
    with self.log_path.open("a") as log:
      self._process = subprocess.Popen(
          self._command, env=self._env, stdout=log, stderr=subprocess.STDOUT,
          start_new_session=True)
    return _wait(self._healthy, self._process, self.log_path,
                 "mlflow server", RuntimeError)

  def _healthy(self) -> bool:
    try:
      return requests.get(f"{self.tracking_uri}/health", timeout=5).ok
    except requests.ConnectionError:
      return False

  def stop(self) -> None:
    """SIGTERM to the server and its workers; SIGKILL if they linger."""
    _stop(self._process, signal.SIGTERM)


@dataclasses.dataclass
class TeamServer:
  """A running team's server: its URI, its admin and its users.

  Attributes:
    tracking_uri: `http://127.0.0.1:PORT`, the same after `start_mlflow`.
    admin: the login of the admin MLflow made at first start.
    artifacts: where the server keeps the artifacts it serves.
    start_s: seconds from nothing to a server that answers.
  """

  tracking_uri: str
  admin: Credentials
  artifacts: pathlib.Path
  start_s: float
  _mlflow: MlflowServer
  _postgres: Postgres

  def create_user(self, username: str, password: str) -> Credentials:
    """A new login (a password of 12 characters or more, MLflow's rule),
    with the recipe's default permission on everything."""
    self._admin_call("2.0", "users/create", username=username,
                     password=password)
    return Credentials(username, password)

  def grant(self, username: str, experiment_id: str, permission: str) -> None:
    """Sets `username`'s permission on one experiment: READ, USE, EDIT,
    MANAGE or DENY. The default permission is a floor under any grant but
    DENY: a READ grant still lets the user edit."""
    self._admin_call("3.0", "users/permissions/grant", username=username,
                     resource_type="experiment", resource_id=experiment_id,
                     permission=permission)

  def empty_store(self) -> None:
    """A fresh server's store (`Postgres.empty_store`)."""
    self._postgres.empty_store()

  def stop_mlflow(self) -> None:
    """Stops the MLflow server; PostgreSQL and everything in it stay."""
    self._mlflow.stop()

  def start_mlflow(self) -> float:
    """Starts the MLflow server again, on the same port and store; the
    seconds until it answers."""
    return self._mlflow.start()

  def _admin_call(self, version: str, endpoint: str, **body: str) -> None:
    response = requests.post(
        f"{self.tracking_uri}/api/{version}/mlflow/{endpoint}", json=body,
        auth=(self.admin.username, self.admin.password), timeout=60)
    if not response.ok:
      raise RuntimeError(f"{endpoint}: {response.status_code} {response.text}")


def _recipe_auth() -> configparser.SectionProxy:
  """cluster/mlflow/basic_auth.ini's settings."""
  config = configparser.ConfigParser()
  config.read_string((RECIPE / "basic_auth.ini").read_text())
  return config["mlflow"]


def _auth_database() -> str:
  """The name of the recipe's database of users."""
  return _recipe_auth()["database_uri"].rsplit("/", 1)[1]


def _auth_config(folder: pathlib.Path, database_uri: str) -> pathlib.Path:
  """The recipe's basic_auth.ini, its users in `database_uri`."""
  config = configparser.ConfigParser()
  config.read_dict({"mlflow": {**_recipe_auth(),
                               "database_uri": database_uri}})
  path = folder / "basic_auth.ini"
  with path.open("w") as file:
    config.write(file)
  return path


@contextlib.contextmanager
def running(folder: pathlib.Path, workers: int = 1) -> Iterator[TeamServer]:
  """A PostgreSQL and an `mlflow server` with basic-auth on it, both stopped
  at the end whatever happens.

  Args:
    folder: for the server's artifacts, auth config and log.
    workers: the MLflow server's worker processes (1: requests are served
      on threads; more cost a Python process each on a small machine).

  Raises:
    Unavailable: no PostgreSQL could be found or started here.
    RuntimeError: the MLflow server did not start.
  """
  start = time.monotonic()
  postgres = Postgres()
  mlflow_server = None
  try:
    postgres.start()
    for database in ("mlflow", _auth_database()):
      postgres.create_database(database)
    admin = Credentials(_recipe_auth()["admin_username"],
                        secrets.token_hex(12))
    mlflow_server = MlflowServer(folder, postgres, admin, workers)
    mlflow_server.start()
    yield TeamServer(mlflow_server.tracking_uri, admin, folder / "artifacts",
                     time.monotonic() - start, mlflow_server, postgres)
  finally:
    if mlflow_server:
      mlflow_server.stop()
    postgres.stop()
