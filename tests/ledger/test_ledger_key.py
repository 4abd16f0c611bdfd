"""The ledger's key: owner-only beside a store, or the team's file named by
TAN_TUNE_LEDGER_KEY_FILE; exported and imported; one key per store."""

import hashlib
import hmac
import os
import stat

import pytest

from tan_tune import api
from tan_tune.cli import main as cli
from tan_tune.errors import ConfigError
from tan_tune.ledger import charge
from tan_tune.ledger import ledger as ledger_lib
from tan_tune.ledger import ledger_key
from tan_tune.privacy import accounting
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.training import datasets
import digits_data

DIGITS_N = 1437
VARIABLE = "TAN_TUNE_LEDGER_KEY_FILE"


def _digits() -> datasets.Examples:
  return datasets.examples(datasets.load_dataset(digits_data.DIGITS))


def _entry(promotion, identity, budget=8.0):
  triplet = triplet_lib.PrivacyTriplet(DIGITS_N, 512, 4.0, 100)
  return ledger_lib.Entry(
      dataset_identity=identity, dataset_name="digits", promotion=promotion,
      triplet=triplet, delta=1 / DIGITS_N,
      epsilon=accounting.epsilon(triplet).epsilon, budget=budget)


@pytest.fixture(autouse=True)
def _no_team_key(monkeypatch):
  """Each test names its key file, or none."""
  monkeypatch.delenv(VARIABLE, raising=False)


@pytest.fixture
def ledger(migrated_mlflow_db):
  return ledger_lib.Ledger(migrated_mlflow_db)


@pytest.fixture
def team_key(tmp_path, monkeypatch):
  """A team's key file, group-readable, named by the variable."""
  path = tmp_path / "team" / "ledger.key"
  path.parent.mkdir()
  path.write_bytes(os.urandom(ledger_key.KEY_BYTES))
  path.chmod(0o640)
  monkeypatch.setenv(VARIABLE, str(path))
  return path


def test_a_dataset_is_keyed_by_its_stores_secret_owner_only_key(tmp_path):
  """Without the key the identity says nothing of the examples: the key
  file is 0600 in a 0700 folder beside the store, and another store's key
  gives another identity."""
  examples = _digits()
  first = ledger_lib.Ledger(f"sqlite:///{tmp_path}/a/mlflow.db")
  other = ledger_lib.Ledger(f"sqlite:///{tmp_path}/b/mlflow.db")
  (tmp_path / "a").mkdir()
  (tmp_path / "b").mkdir()
  assert first.identity(examples) != other.identity(examples)
  path = ledger_key.key_path(first.tracking_uri)
  assert path == tmp_path / "a" / "mlflow.db.ledger-key" / "key"
  assert stat.S_IMODE(path.stat().st_mode) == 0o600
  assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
  assert len(path.read_bytes()) == ledger_key.KEY_BYTES
  # The same store, another process: the same key, the same identity.
  again = ledger_lib.Ledger(first.tracking_uri)
  assert again.identity(examples) == first.identity(examples)
  assert hmac.new(path.read_bytes(), examples.sorted_digests,
                  hashlib.sha256).hexdigest() == first.identity(examples)


def test_a_server_stores_key_lives_in_the_users_config(tmp_path, monkeypatch):
  monkeypatch.setenv("HOME", str(tmp_path))
  path = ledger_key.key_path("http://127.0.0.1:5000")
  assert path.parent == tmp_path / ".config/tan_tune/ledger-keys"
  assert path.name == "http%3A%2F%2F127.0.0.1%3A5000"


def test_a_key_others_can_read_is_refused_and_a_lost_one_not_replaced(
    ledger):
  examples = _digits()
  ledger.reserve(_entry("first/run", identity=examples))
  path = ledger_key.key_path(ledger.tracking_uri)
  path.chmod(0o644)
  with pytest.raises(ConfigError, match="owner-only"):
    ledger_lib.Ledger(ledger.tracking_uri).identity(examples)
  path.unlink()
  with pytest.raises(ConfigError, match="has entries but no key here; get the"):
    ledger_lib.Ledger(ledger.tracking_uri).entries(examples)
  assert not path.exists()




def test_the_team_file_keys_every_store_and_may_be_group_readable(
    team_key, tmp_path):
  """One key for the team: a mounted Secret is a link to its file."""
  link = tmp_path / "secret-volume" / "key"
  link.parent.mkdir()
  link.symlink_to(team_key)
  os.environ[VARIABLE] = str(link)
  examples = _digits()
  sqlite = ledger_lib.Ledger(f"sqlite:///{tmp_path}/mlflow.db")
  assert ledger_key.key_path("http://mlflow:5000") == link
  assert sqlite.identity(examples) == examples.keyed(team_key.read_bytes())
  assert not (tmp_path / "mlflow.db.ledger-key").exists()  # None made.


@pytest.mark.parametrize("mode", [0o644, 0o660, 0o604])
def test_a_team_file_others_may_read_or_the_group_write_is_refused(
    team_key, mode):
  team_key.chmod(mode)
  with pytest.raises(ConfigError, match="readable by its team's group at"):
    ledger_key.load("http://mlflow:5000", create=True)


def test_a_missing_team_file_is_never_made(team_key):
  team_key.unlink()
  with pytest.raises(ConfigError, match=f"{VARIABLE}.*--export-key"):
    ledger_key.load("http://mlflow:5000", create=True)
  assert not team_key.exists()


def test_exported_then_imported_the_key_charges_the_same_ledger(
    ledger, tmp_path, monkeypatch, capsys):
  """The operator exports the store's key; a colleague imports it and
  charges the same dataset's ledger: one ledger id, one key id."""
  examples = _digits()
  charge.charge(ledger, _entry("alice/run", examples), new_ledger=True)
  exported = tmp_path / "team.key"
  assert cli.main(["ledger", "--tracking-uri", ledger.tracking_uri,
                   "--export-key", str(exported)]) == 0
  assert stat.S_IMODE(exported.stat().st_mode) == 0o600
  key_id = ledger_key.key_id(exported.read_bytes())
  assert key_id in capsys.readouterr().out
  # Bob: the same store read from elsewhere, his own copy of the key.
  own = ledger_key.key_path(ledger.tracking_uri)
  own.unlink()
  exported.chmod(0o640)
  assert cli.main(["ledger", "--tracking-uri", ledger.tracking_uri,
                   "--import-key", str(exported)]) == 0
  assert stat.S_IMODE(own.stat().st_mode) == 0o600
  charge.charge(ledger_lib.Ledger(ledger.tracking_uri),
                _entry("bob/run", examples), new_ledger=False)
  first, second = ledger_lib.Ledger(ledger.tracking_uri).entries(examples)
  assert first.ledger_id == second.ledger_id
  assert api.ledger(ledger.tracking_uri).key_id == key_id


def test_a_key_file_others_can_read_is_not_imported(ledger, tmp_path):
  shared = tmp_path / "team.key"
  shared.write_bytes(os.urandom(ledger_key.KEY_BYTES))
  shared.chmod(0o644)
  with pytest.raises(ConfigError, match="readable by its team's group at"):
    api.import_ledger_key(shared, ledger.tracking_uri)
  assert not ledger_key.key_path(ledger.tracking_uri).exists()


def test_a_charge_under_another_key_is_refused_naming_the_fix(
    ledger, tmp_path, monkeypatch):
  """Alice's key keyed the store's first charge; Bob holds a key of his
  own: his charge is refused and withdrawn, the ledger keeps one key, and
  importing his key is refused too."""
  examples = _digits()
  charge.charge(ledger, _entry("alice/run", examples), new_ledger=True)
  bobs = tmp_path / "bob.key"
  bobs.write_bytes(os.urandom(ledger_key.KEY_BYTES))
  bobs.chmod(0o600)
  monkeypatch.setenv(VARIABLE, str(bobs))
  bob = ledger_lib.Ledger(ledger.tracking_uri)
  with pytest.raises(ConfigError, match=(
      r"the key of this store's ledger \(key id [0-9a-f]{16}\); get the"
      r" team's ledger key: set TAN_TUNE_LEDGER_KEY_FILE")):
    charge.charge(bob, _entry("bob/run", examples), new_ledger=True)
  monkeypatch.delenv(VARIABLE)
  with pytest.raises(ConfigError, match="--import-key"):
    api.import_ledger_key(bobs, ledger.tracking_uri)
  assert [e.promotion for e in ledger.entries()] == ["alice/run"]
