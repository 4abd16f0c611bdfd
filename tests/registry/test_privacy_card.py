"""The privacy card, read from a promoted run's published record."""

import json
import re

from mlflow import MlflowClient
import pytest

import promoted_records
from tan_tune.privacy import accounting
from tan_tune.privacy import trial_count
from tan_tune.privacy import tuning
from tan_tune.registry import privacy_card
from tan_tune.release import release


@pytest.fixture
def record(migrated_mlflow_db):
  client = MlflowClient(migrated_mlflow_db)
  run_id = promoted_records.log_run(client, client.create_experiment("e"))
  return privacy_card.Published(client.get_run(run_id), "promoted")


def test_the_card_holds_the_guarantee_and_what_it_rests_on(record):
  card = privacy_card.build(record, audit=None).as_dict()
  assert card["unit"].startswith("example-level")
  assert card["adjacency"] == "add/remove-one"
  assert set(card["epsilon"]) == {"rdp", "prv", "pld"}
  assert card["epsilon"]["rdp"] == pytest.approx(1.9997, abs=1e-4)
  assert card["default_accountant"] == "rdp"
  assert card["delta"] == pytest.approx(1 / 1437)
  assert card["delta_times_n"] == pytest.approx(1.0)
  assert card["sampling"] == {
      "sampler": "poisson", "code": "poisson", "accountant": "poisson",
      "matches": True, "described": "Poisson sampling at q = B/N"}
  assert card["triplet"] == {"N": 1437, "B": 512, "sigma": 3.9182, "S": 40,
                             "C": 1.0, "q": pytest.approx(512 / 1437),
                             "eta": pytest.approx(0.40667, abs=1e-5)}
  assert card["clipping"] == {"engine": "fast", "bound": "C (exact)"}
  assert card["released"]["weights"].startswith("the final weights only (ema")
  assert card["released"]["metrics"] == release.ALLOW_LIST["promoted"].metrics
  assert card["tuning"]["mode"] == "non_private"
  assert card["ledger"]["composed_epsilon"] == pytest.approx(2.9997, abs=1e-4)
  assert card["audit"] is None
  assert card["normalisation"] == {"mean": [0.5], "std": [0.5]}
  assert card["starting_weights_sha256"] is None
  assert card["package"] == {"version": "0.1.0", "git_commit": "0123abcd"}
  json.loads(privacy_card.build(record, None).as_json())


def test_its_markdown_and_tags_say_the_same(record):
  card = privacy_card.build(record, audit=0.42)
  text = card.as_markdown()
  assert text.startswith("# Privacy card: (2, 0.000696)-DP")
  assert "RDP 1.9997" in text and "eps_lb = 0.420" in text
  assert "they match" in text and "example-level" in text
  assert "**Starting weights**: a random initialisation." in text
  assert len(text) < 5000  # What a registered version's description holds.
  tags = card.tags()
  assert tags[privacy_card.CARD_TAG] == privacy_card.JSON_FILE
  assert float(tags[privacy_card.EPSILON_TAG]) == pytest.approx(card.epsilon)
  assert tags[privacy_card.ACCOUNTANT_TAG] == "rdp"
  assert tags["tan_tune.run_id"] == record.run_id


def test_a_private_searchs_card_is_the_whole_searchs_guarantee(
    migrated_mlflow_db):
  """Read from the search run before any trial: its eps covers every trial
  (their number secret), each a private run at the reference triplet."""
  client = MlflowClient(migrated_mlflow_db)
  run_id = promoted_records.log_search_run(client, client.create_experiment("s"))
  card = privacy_card.build_search(
      privacy_card.Published(client.get_run(run_id), "search"))
  fields = card.as_dict()
  expected = tuning.search_epsilon(promoted_records.TRIPLET, 1 / 1437,
                                   trial_count.TrialCount("geometric", 1.5))
  assert fields["epsilon"] == {expected.accountant: expected.epsilon}
  # More than one run's eps under the same PLD: the selection costs.
  one_run = accounting.epsilon(promoted_records.TRIPLET, 1 / 1437, "pld")
  assert card.epsilon == expected.epsilon > one_run.epsilon
  assert fields["triplet"]["C"] == 1.0 and fields["triplet"]["B"] == 512
  assert fields["clipping"]["engine"].startswith("auto (each trial's: fast")
  assert fields["clipping"]["bound"] == "C (exact)"
  assert fields["sampling"]["matches"]
  assert fields["tuning"]["mode"] == "private_random_search"
  assert "geometric of mean 1.5, drawn secretly" in (
      fields["tuning"]["guarantee"])
  assert fields["released"]["metrics"] == release.ALLOW_LIST["search"].metrics
  assert expected.accountant.upper() in card.as_markdown()
  assert "ranked on the test split" in fields["tuning"]["guarantee"]
  assert card.tags()["tan_tune.run_id"] == run_id


def test_it_reads_nothing_the_allow_list_leaves_out(record):
  with pytest.raises(release.NotReleasable, match="dataset_identity"):
    record.param("dataset_identity")
  with pytest.raises(release.NotReleasable, match="tan_tune.examples"):
    record.tag("tan_tune.examples_per_second")
  with pytest.raises(release.NotReleasable, match="train_loss"):
    record.metric("train_loss")


def test_code_tags_name_the_version_and_the_commit():
  tags = privacy_card.code_tags()
  assert re.fullmatch(r"\d+\.\d+\.\d+.*", tags["tan_tune.package_version"])
  assert re.fullmatch(r"[0-9a-f]{40}|unknown", tags["tan_tune.git_commit"])


def test_a_private_trains_card_is_stated_through_its_own_allow_list():
  """`tan-tune train` logs no MLflow run: its card reads what the run
  states, as MLflow would store it, and nothing the 'train' list leaves out."""
  params = {"privacy": {"dataset_size": 1437, "default_accountant": "rdp",
                        "epsilon": {"rdp": {"epsilon": 1.5}}},
            "train_loss": 0.1}
  record = privacy_card.Published.stated(
      "train", params, {"tan_tune.clipping": "fast"})
  assert record.run_id is None and record.kind == "train"
  assert record.param("privacy.dataset_size") == "1437"
  assert record.number("privacy.epsilon.rdp.epsilon") == 1.5
  assert record.tag("tan_tune.clipping") == "fast"
  with pytest.raises(release.NotReleasable, match="train_loss"):
    record.param("train_loss")
  with pytest.raises(release.NotReleasable, match="search_run_id"):
    record.tag("tan_tune.search_run_id")
