"""Promotion end to end: a digits search, then its winner on Ray Train.

Real local Ray (2 CPUs), Ray Train's TorchTrainer with gloo workers, real
MLflow (sqlite).
"""

import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import typing

from mlflow import MlflowClient
from mlflow.entities import ViewType
import pytest
import torch
import yaml

from tan_tune import config_io
from tan_tune import mlflow_store
from tan_tune.cli import main as cli
from tan_tune.ledger import ledger as ledger_lib
from tan_tune.promote import run as promote
from tan_tune.search import driver as search
from tan_tune.training import models
from tan_tune.training import seeds
from tan_tune.training import trial
from tan_tune.training import trial_config
import mlflow_browser
import mlflow_stores
import promote_processes
import promoted_runs

# Whole searches and promotions: the end-to-end tier.
pytestmark = [pytest.mark.e2e]

DEMO = pathlib.Path(__file__).resolve().parents[2] / "search_spaces" / "digits-demo.yaml"


@pytest.fixture(scope="module")
def finished_search(tmp_path_factory, local_ray):
  """Two digits trials at B = 64 for a reference (512, 6.0, 20); a
  checkpoint every 5 steps, so that a promotion can be killed twice."""
  folder = tmp_path_factory.mktemp("promote")
  space = yaml.safe_load(DEMO.read_text())
  space.update(name="promote", num_trials=2, eval_every=5)
  space["reference"].update(steps=20, noise_multiplier=6.0)
  path = folder / "promote.yaml"
  path.write_text(yaml.safe_dump(space))
  uri = mlflow_stores.store(folder)
  result = search.run_search(path, search.SearchOptions(
      storage=folder / "runs", tracking_uri=uri, verbose=0))
  assert [row["status"] for row in result.leaderboard] == ["finished"] * 2
  return result, uri


class Promotion(typing.NamedTuple):
  """The winner's promotion, as promoted_search ran it."""
  result: search.SearchResult
  uri: str
  printed: str  # By both commands, in order.
  resumed: str  # By the command that resumed it.
  after_the_kill: str  # What it printed once a worker was killed.
  forked: subprocess.CompletedProcess  # The killed promotion's copy.


# The registered model the promoted run becomes a version of.
REGISTERED = "digits"


def _promote_command(directory):
  # --new-ledger: the store's first private run. --verbose: Ray's output
  # reaches the logs, not promote.log, which a finished run deletes.
  return [sys.executable, "-m", "tan_tune.cli", "promote",
          str(directory), "--workers", "2", "--calibrate",
          "--new-ledger", "--verbose", "--register", REGISTERED]


def _checkpoints(train):
  """Ray Train's checkpoint folders (its snapshot file is named alike)."""
  return {path for path in train.glob("checkpoint_*") if path.is_dir()}


@pytest.fixture(scope="module")
def promoted_search(finished_search, tmp_path_factory):
  """finished_search with its winner promoted once, as a user would: on 2
  workers after a calibration, through both failures a promotion recovers
  from. At the reference run's first checkpoint the driver is killed with
  its local Ray; the same command resumes it, and at its own first
  checkpoint one of its Ray Train workers is killed. One run serves every
  test: each promotion costs a driver, a Ray and its workers."""
  result, uri = finished_search
  logs = tmp_path_factory.mktemp("promote-logs")
  command = _promote_command(result.directory)
  train = (result.directory / "promote" / _winner(result) / "train"
           / "reference")
  with promote_processes.running(command, logs / "first.log") as first:
    promote_processes.wait_while_alive(first, logs / "first.log",
                                       lambda: _checkpoints(train))
    promote_processes.kill_session(first.pid)  # The driver and its Ray.
  # The fork of issue 59: the killed promotion's folder copied elsewhere.
  copy = result.directory.parent.parent / "copy" / result.directory.name
  shutil.copytree(result.directory, copy)
  forked = subprocess.run(_promote_command(copy), capture_output=True,
                          text=True, timeout=600, check=False)
  shutil.rmtree(copy)  # It holds the checkpoint's secret states.
  before = _checkpoints(train)
  with promote_processes.running(command, logs / "resumed.log") as resumed:
    promote_processes.wait_while_alive(
        resumed, logs / "resumed.log", lambda: _checkpoints(train) - before)
    workers = promote_processes.train_worker_pids(resumed.pid)
    assert len(workers) == 2, workers
    killed_at = len((logs / "resumed.log").read_text())
    os.kill(workers[1], signal.SIGKILL)
    status = resumed.wait(timeout=600)
  printed = (logs / "resumed.log").read_text()
  assert status == 0, printed[-3000:]
  return Promotion(result, uri, (logs / "first.log").read_text() + printed,
                   printed, printed[killed_at:], forked)


def _winner(result):
  return result.leaderboard[0]["trial_id"]


def test_search_then_promote_with_two_workers_logs_a_linked_private_run(
    promoted_search):
  result, uri = promoted_search.result, promoted_search.uri
  out = promoted_search.printed
  winner = result.leaderboard[0]
  assert "promoted run finished (private)" in out
  assert "calibration at B = 8" in out
  # The prediction is shown before the reference run starts, then beside it.
  assert out.index("predicted ema_accuracy at B = 512:") < out.index(
      "promoted run finished")
  assert "(90% interval [" in out

  client, promoted = promoted_runs.promoted(uri, trial_id=winner["trial_id"])
  experiment = client.get_experiment_by_name("promote")
  runs = client.search_runs([experiment.experiment_id])
  tags, metrics = promoted.data.tags, promoted.data.metrics
  assert promoted.info.status == "FINISHED"
  assert tags["tan_tune.evaluated_on"] == "test"  # No selection saw it.
  assert tags["tan_tune.simulated"] == "false"
  assert tags[mlflow_store.STATUS_TAG] == "finished"
  assert tags[promote.SEARCH_RUN_TAG] == result.parent_run_id
  assert tags[promote.SOURCE_TRIAL_TAG] == winner["trial_id"]
  assert tags[promote.SOURCE_RUN_TAG] == winner["mlflow_run_id"]
  assert tags["tan_tune.private"] == "true"
  assert tags["tan_tune.accountant"] == "rdp"
  assert tags["tan_tune.adjacency"] == "add/remove-one"
  # Beside the search, not inside it.
  assert mlflow_store.PARENT_TAG not in tags
  params = promoted.data.params
  assert params["privacy.batch_size"] == "512"
  assert params["privacy.noise_multiplier"] == "6.0"
  assert params["privacy.steps"] == "20"
  assert params["reference_run.privacy.reference_batch_size"] == "None"
  for key in ("accuracy", "ema_accuracy", "final_epsilon_rdp",
              "final_epsilon_prv", "final_epsilon_pld", "final_eps_tan",
              "predicted_ema_accuracy", "predicted_low",
              "prediction_error"):
    assert key in metrics, key
  assert metrics["final_epsilon_rdp"] <= 8
  assert metrics["ema_accuracy"] > 0.5
  steps = {m.step for m in client.get_metric_history(
      promoted.info.run_id, "accuracy")}
  assert steps == {5, 10, 15, 20}
  artifacts = {a.path for folder in ("model", "scaling_law")
               for a in client.list_artifacts(promoted.info.run_id, folder)}
  assert artifacts == {"model/model.pt", "scaling_law/scaling_law.json",
                       "scaling_law/scaling_law.png"}
  calibration = [r for r in runs
                 if r.data.tags.get(mlflow_store.PARENT_TAG)
                 == promoted.info.run_id]
  assert sorted(int(r.data.params["simulated.batch_size"])
                for r in calibration) == [8, 16, 32]
  assert all(r.data.tags[mlflow_store.KIND_TAG] == "calibration"
             for r in calibration)
  trials = [r for r in runs
            if r.data.tags.get(mlflow_store.KIND_TAG) == "trial"]
  assert {r.data.tags["tan_tune.evaluated_on"] for r in trials
          } == {"validation"}
  # Calibration is measured as the promoted run: whole training set, test.
  assert {r.data.tags["tan_tune.evaluated_on"] for r in calibration
          } == {"test"}
  assert {r.data.tags["tan_tune.simulated"] for r in trials} == {"true"}
  # The fit saw the calibration runs only, never the winner's own score.
  law = json.loads((result.directory / "promote" / winner["trial_id"]
                    / promote.SCALING_JSON).read_text())
  assert sorted(law["batch_sizes"]) == [8, 16, 32]

  # The weights load into the model and carry their privacy record.
  directory = result.directory / "promote" / winner["trial_id"]
  saved = torch.load(directory / promote.MODEL_FILE, weights_only=False)
  model = models.build_model(models.ModelConfig("small-cnn"), (1, 8, 8), 10)
  model.load_state_dict(saved["model"])
  assert saved["privacy"]["epsilon"]["rdp"]["epsilon"] <= 8
  law = json.loads((directory / promote.SCALING_JSON).read_text())
  assert law["actual"] == metrics["ema_accuracy"]
  # The checkpoints held the secret generator states: gone once finished.
  assert not (directory / promote.TRAIN_FOLDER).exists()
  assert directory.stat().st_mode & 0o077 == 0
  # --new-ledger let this run charge a fresh store's ledger, once.
  [entry] = [e for e in ledger_lib.Ledger(uri).entries()
             if e.promoted_run_id == promoted.info.run_id]
  state = json.loads((directory / promote.STATE_FILE).read_text())
  assert entry.promotion == ledger_lib.promotion_key(
      result.parent_run_id, winner["trial_id"], state["attempt"])


def test_the_promoted_run_publishes_only_allowed_metrics(promoted_search):
  result, uri = promoted_search.result, promoted_search.uri
  _, run = promoted_runs.promoted(uri, trial_id=_winner(result))
  for key in run.data.metrics:
    assert promoted_runs.PRIVATE_RUN_METRICS.fullmatch(key), key
  for key in ("train_loss", "clipped_fraction", "examples_per_second"):
    assert not any(key in k for k in run.data.metrics)


def _published_integers(value, found):
  """Every integer in a published value, numbers in strings included."""
  if isinstance(value, dict):
    for key, item in value.items():
      _published_integers(key, found)
      _published_integers(item, found)
  elif isinstance(value, (list, tuple)):
    for item in value:
      _published_integers(item, found)
  elif isinstance(value, torch.Tensor):
    if value.numel() == 1 and not value.is_floating_point():
      found.add(int(value))
  elif isinstance(value, bool):
    return
  elif isinstance(value, int):
    found.add(value)
  elif isinstance(value, float) and value.is_integer():
    found.add(int(value))
  elif isinstance(value, str):
    # Whole numbers, not the digits inside a run id's hex.
    found.update(int(n) for n in re.findall(
        r"(?<![0-9A-Za-z_.])\d+(?![0-9A-Za-z_.])", value))
  return found


def test_no_published_value_replays_the_promoted_run(promoted_search,
                                                     monkeypatch, tmp_path):
  """The attack of issue 11: knowing every published byte and every training
  example, rerun the private run with each published number as its seed
  (the old promoted run reproduced exactly from the search file's seed)."""
  result, uri = promoted_search.result, promoted_search.uri
  directory = result.directory / "promote" / result.leaderboard[0]["trial_id"]
  client, run = promoted_runs.promoted(uri, trial_id=_winner(result))
  published = {"params": run.data.params, "tags": run.data.tags,
               "metrics": run.data.metrics}
  artifacts = pathlib.Path(client.download_artifacts(run.info.run_id, "",
                                                     str(tmp_path)))
  saved = torch.load(directory / promote.MODEL_FILE, weights_only=False)
  published["model.pt"] = saved
  # The search's own files and the promotion's; Ray Tune's trial state under
  # tune/ describes simulations, seeded publicly by design.
  files = [*artifacts.rglob("*"), *result.directory.glob("*"),
           *directory.rglob("*")]
  for path in files:
    if path.is_file() and path.suffix in (".json", ".yaml", ".txt", ".log"):
      published[str(path)] = path.read_text(errors="replace")
  candidates = sorted(n for n in _published_integers(published, set())
                      if 0 <= n < 2**63)
  assert 0 in candidates  # The search file's seed is published, as before.
  print(f"{len(candidates)} published integers tried as seeds")
  config = config_io.from_dict(trial_config.TrialConfig, saved["config"])
  assert config.privacy.claims_privacy

  public_seeds = seeds.run_seeds

  def replay(seed):
    monkeypatch.setattr(seeds, "run_seeds",
                        lambda public, secret, world_size=1:
                        public_seeds(seed, secret=False))
    folder = tmp_path / f"replay-{seed}"
    trial.run_trial(config, checkpoint_dir=folder)
    return torch.load(folder / trial.CHECKPOINT_FILE,
                      weights_only=False)["model"]

  def distance(weights):
    return max(float((weights[k] - v).abs().max())
               for k, v in saved["model"].items())

  # A replay with the right seeds matches to float noise (two workers' sums
  # against one worker's): 1e-6, against 1e-2 for other noise.
  gaps = {seed: distance(replay(seed)) for seed in candidates}
  assert min(gaps.values()) > 1e-3, gaps
  # Another private run of the same config is another draw as well.
  monkeypatch.undo()
  trial.run_trial(config, checkpoint_dir=tmp_path / "again")
  again = torch.load(tmp_path / "again" / trial.CHECKPOINT_FILE,
                     weights_only=False)["model"]
  assert distance(again) > 1e-3


def test_a_plan_from_the_searchs_mlflow_run(finished_search, tmp_path,
                                           capsys):
  result, uri = finished_search
  status = cli.main(["promote", "--mlflow-run", result.parent_run_id,
                     "--tracking-uri", uri, "--storage", str(tmp_path),
                     "--max-physical-batch", "64", "--plan", "--json"])
  assert status == 0
  plan = json.loads(capsys.readouterr().out)
  assert plan["trial_id"] == result.leaderboard[0]["trial_id"]
  assert plan["search_run_id"] == result.parent_run_id
  assert plan["privacy"]["noise_multiplier"] == 6.0
  assert plan["reference_run"]["max_physical_batch"] == 64
  assert not list(tmp_path.iterdir())  # A plan starts and writes nothing.


def test_a_promoted_trial_is_never_run_twice(promoted_search, capsys):
  result, uri = promoted_search.result, promoted_search.uri
  with pytest.raises(SystemExit) as exit_:
    cli.main(["promote", str(result.directory)])
  assert exit_.value.code == 3
  assert "already promoted" in capsys.readouterr().err
  # Still the winner's one promoted run.
  runs = MlflowClient(uri).search_runs(
      [MlflowClient(uri).get_experiment_by_name("promote").experiment_id],
      filter_string=f"tags.`{mlflow_store.KIND_TAG}` = 'promoted' and"
      f" tags.`{promote.SOURCE_TRIAL_TAG}` = '{_winner(result)}'")
  assert len(runs) == 1


def test_a_deleted_promoted_run_still_counts_and_is_never_run_again(
    promoted_search, capsys, tmp_path):
  """Issue 26: deleting the promoted run (or its ledger entry) and promoting
  again trained a second run, the one charge re-linked to it."""
  result, uri = promoted_search.result, promoted_search.uri
  winner = result.leaderboard[0]["trial_id"]
  client, promoted = promoted_runs.promoted(uri, trial_id=winner)
  ledger = ledger_lib.Ledger(uri)
  charged = ledger.entries()
  [entry] = [e for e in charged if e.promoted_run_id == promoted.info.run_id]
  [entry_run] = client.search_runs(
      [ledger.experiment_id],
      filter_string=f"tags.`{ledger_lib.PROMOTION_TAG}` = '{entry.promotion}'")
  deleted = []
  try:
    for run_id in (promoted.info.run_id, entry_run.info.run_id):
      client.delete_run(run_id)
      deleted.append(run_id)
      # From its folder, and from another one (a new attempt).
      for source in ([str(result.directory)],
                     ["--mlflow-run", result.parent_run_id, "--tracking-uri",
                      uri, "--storage", str(tmp_path)]):
        with pytest.raises(SystemExit) as exit_:
          cli.main(["promote", *source])
        assert exit_.value.code == 3
        err = capsys.readouterr().err
        assert (f"already promoted: MLflow run {promoted.info.run_id}"
                " (deleted since") in err
      assert ledger_lib.Ledger(uri).entries() == charged
  finally:
    for run_id in deleted:  # Other tests read them.
      client.restore_run(run_id)
  assert len(client.search_runs(
      [result.experiment_id], run_view_type=ViewType.ALL,
      filter_string=f"tags.`{promote.SOURCE_TRIAL_TAG}` = '{winner}'")) == 1


def _only_finished_run(uri, trial_id):
  client = MlflowClient(uri)
  runs = client.search_runs(
      [client.get_experiment_by_name("promote").experiment_id],
      filter_string=f"tags.`{promote.SOURCE_TRIAL_TAG}` = '{trial_id}'")
  assert [r.info.status for r in runs] == ["FINISHED"]
  steps = {m.step for m in client.get_metric_history(runs[0].info.run_id,
                                                     "accuracy")}
  assert steps == {5, 10, 15, 20}


def test_a_killed_driver_resumes_the_same_promoted_run(promoted_search):
  """promoted_search killed the first command; the second finished it."""
  assert "resuming promoted run" in promoted_search.resumed
  _only_finished_run(promoted_search.uri, _winner(promoted_search.result))


def test_a_copy_of_a_killed_promotion_resumes_nowhere_else(promoted_search):
  """The killed promotion's folder, copied and promoted from the copy
  before the original resumed: refused before it trained, in one line; the
  original then finished, the only run of its charge."""
  forked = promoted_search.forked
  assert forked.returncode == 2, forked.stderr[-2000:]
  [line] = [l for l in forked.stderr.splitlines() if "runs in" in l]
  assert "search directory" in line and str(
      promoted_search.result.directory.resolve()) in line
  _only_finished_run(promoted_search.uri, _winner(promoted_search.result))


def test_a_killed_worker_is_restarted_from_the_checkpoint(promoted_search):
  """promoted_search killed a worker of the resumed run; its driver went on."""
  terminal = promoted_search.after_the_kill
  assert "[FailurePolicy] RETRY" in terminal  # Ray Train restarted them ...
  assert "resuming" not in terminal  # ... and the same driver finished.
  _only_finished_run(promoted_search.uri, _winner(promoted_search.result))


@pytest.mark.browser
def test_mlflow_ui_in_a_browser(promoted_search, tmp_path):
  """A real `mlflow ui` over the finished search and its promotion, driven
  by headless Chromium: the experiment opens on its runs (not the GenAI
  overview), the parent run lists its nested trials, the promoted run is
  beside it, and the plots render. TAN_TUNE_SCREENSHOTS=docs keeps the
  screenshots there."""
  from selenium.webdriver.common.by import By  # pylint: disable=g-import-not-at-top
  browser = mlflow_browser.chromium()
  result, uri = promoted_search.result, promoted_search.uri
  client, promoted = promoted_runs.promoted(uri, trial_id=_winner(result))
  trial_names = [client.get_run(row["mlflow_run_id"]).info.run_name
                 for row in result.leaderboard]
  shots = pathlib.Path(os.environ.get("TAN_TUNE_SCREENSHOTS", tmp_path))
  try:
    with mlflow_browser.mlflow_ui(uri) as port:
      # The link tan-tune prints: the runs, not the GenAI overview.
      browser.get(mlflow_store.ui_url(result.experiment_id, port))
      text = mlflow_browser.wait_for_text(browser, "search-promote",
                                          promoted.info.run_name)
      assert "/runs" in browser.current_url
      for close in browser.find_elements(By.CSS_SELECTOR,
                                         "button[aria-label='Close']"):
        close.click()  # The assistant's panel, for the screenshots.
      assert "Detect Issues" not in text and "Token Usage" not in text
      browser.save_screenshot(str(shots / "mlflow-runs.png"))
      # The parent run unfolds into its nested trials.
      parent_row = browser.find_element(
          By.XPATH, "//*[text()='search-promote']/ancestor::*[@role='row'][1]")
      parent_row.find_element(By.TAG_NAME, "button").click()
      mlflow_browser.wait_for_text(browser, *trial_names)
      browser.save_screenshot(str(shots / "mlflow-nested-trials.png"))
      # The search's pictures, and the promoted run's learning curve.
      base = f"http://127.0.0.1:{port}/#/experiments/{result.experiment_id}"
      workflow = "?workflowType=machine_learning"
      browser.get(f"{base}/runs/{result.parent_run_id}/artifacts/plots/"
                  f"optimization_history.png{workflow}")
      mlflow_browser.image_rendered(browser, "plots/optimization_history.png")
      browser.save_screenshot(str(shots / "mlflow-search-plot.png"))
      browser.get(f"{base}/runs/{promoted.info.run_id}/artifacts/plots/"
                  f"learning_curve.png{workflow}")
      mlflow_browser.image_rendered(browser, "plots/learning_curve.png")
      browser.save_screenshot(str(shots / "mlflow-promoted-curve.png"))
      # The registered version, its privacy card as its description.
      browser.get(f"http://127.0.0.1:{port}/#/models/{REGISTERED}/versions/1")
      text = mlflow_browser.wait_for_text(browser, "Privacy card", "candidate")
      eps = client.get_model_version(REGISTERED, "1").tags["privacy.epsilon"]
      assert f"({float(eps):.4g}, " in text and "example-level" in text
      browser.save_screenshot(str(shots / "mlflow-registered-card.png"))
  finally:
    browser.quit()


def _digits_test_split():
  """The digits test split as the promoted run scored it: raw float32
  images in [0, 1] and their labels."""
  from tan_tune.training import datasets  # pylint: disable=g-import-not-at-top
  test = datasets.load_dataset(datasets.DatasetConfig(name="digits")).test
  return test.get_batch(torch.arange(len(test)))


def test_the_promoted_run_is_a_registered_version_with_its_card(
    promoted_search):
  """Registered when it first started, found again by the resumed run (one
  version), the candidate once finished; its card on the run and as the
  version's description and tags."""
  client, promoted = promoted_runs.promoted(
      promoted_search.uri, trial_id=_winner(promoted_search.result))
  [version] = client.search_model_versions(f"name = '{REGISTERED}'")
  version = client.get_model_version(REGISTERED, version.version)
  assert (version.version, version.aliases, version.run_id) == (
      1, ["candidate"], promoted.info.run_id)
  assert version.tags["tan_tune.status"] == "finished"
  eps = promoted.data.metrics["final_epsilon_rdp"]
  assert float(version.tags["privacy.epsilon"]) == pytest.approx(eps,
                                                                 rel=1e-5)
  assert version.description.startswith("# Privacy card: (")
  artifacts = {a.path for a in client.list_artifacts(promoted.info.run_id)}
  assert {"mlflow_model", "privacy_card.json", "privacy_card.md"} <= artifacts
  card = json.loads(pathlib.Path(client.download_artifacts(
      promoted.info.run_id, "privacy_card.json")).read_text())
  assert card["epsilon"]["rdp"] == pytest.approx(eps, rel=1e-9)
  assert card["clipping"]["engine"] == promoted.data.tags["tan_tune.clipping"]
  printed = promoted_search.printed
  assert f"registered: {REGISTERED} version 1, alias candidate" in printed
  assert f"mlflow models serve -m models:/{REGISTERED}@candidate" in printed


def test_the_champion_is_served_over_http_at_the_runs_accuracy(
    promoted_search, capsys, tmp_path):
  """`tan-tune registry` refuses a limit below eps, then makes version 1
  the champion; `mlflow models serve` serves models:/digits@champion on
  127.0.0.1 and its answers on the digits test split score what the run
  reported."""
  import requests  # pylint: disable=g-import-not-at-top
  uri = promoted_search.uri
  client, promoted = promoted_runs.promoted(
      uri, trial_id=_winner(promoted_search.result))
  eps = promoted.data.metrics["final_epsilon_rdp"]
  with pytest.raises(SystemExit) as refused:
    cli.main(["registry", REGISTERED, "--champion", "1", "--max-epsilon",
              f"{eps / 2:g}", "--tracking-uri", uri])
  assert refused.value.code == 3
  assert "over --max-epsilon" in capsys.readouterr().err
  assert cli.main(["registry", REGISTERED, "--champion", "1", "--max-epsilon",
                   f"{eps * 1.01:g}", "--tracking-uri", uri]) == 0
  images, labels = _digits_test_split()
  port = promote_processes.free_port()
  command = ["mlflow", "models", "serve", "-m",
             f"models:/{REGISTERED}@champion", "--env-manager", "local",
             "--host", "127.0.0.1", "--port", str(port)]
  # The environment's commands first, as in an activated one: the server
  # starts uvicorn by name.
  scripts = pathlib.Path(sys.executable).parent
  env = dict(os.environ, MLFLOW_TRACKING_URI=uri,
             PATH=f"{scripts}{os.pathsep}{os.environ['PATH']}")
  with promote_processes.running(command, tmp_path / "serve.log",
                                 env=env) as server:
    url = f"http://127.0.0.1:{port}"
    promote_processes.wait_while_alive(
        server, tmp_path / "serve.log",
        lambda: _answers(requests, f"{url}/ping"))
    answer = requests.post(f"{url}/invocations",
                           json={"inputs": images.tolist()}, timeout=60)
  answer.raise_for_status()
  probabilities = torch.tensor(answer.json()["predictions"])
  assert probabilities.shape == (len(labels), 10)
  accuracy = (probabilities.argmax(1) == labels).float().mean().item()
  assert accuracy == pytest.approx(promoted.data.metrics["ema_accuracy"],
                                   abs=1 / len(labels))


def _answers(requests, url):
  try:
    return requests.get(url, timeout=2).ok
  except requests.ConnectionError:
    return False


def test_the_registered_model_loads_where_tan_tune_is_not(promoted_search,
                                                          tmp_path):
  """models:/digits@candidate in a fresh interpreter without site's
  start-up (no .pth, so no editable install): the standard library and
  site-packages alone, mlflow and torch but no tan_tune."""
  client, promoted = promoted_runs.promoted(
      promoted_search.uri, trial_id=_winner(promoted_search.result))
  images, labels = _digits_test_split()
  torch.save(images, tmp_path / "images.pt")
  script = (
      "import sys\n"
      "sys.path.append(sys.argv[2])\n"
      "import importlib.util, mlflow, torch\n"
      "assert importlib.util.find_spec('tan_tune') is None\n"
      f"model = mlflow.pyfunc.load_model('models:/{REGISTERED}@candidate')\n"
      "images = torch.load(sys.argv[1]).numpy()\n"
      "torch.save(torch.tensor(model.predict(images)), sys.argv[1])\n"
      "assert not any(m.startswith('tan_tune') for m in sys.modules)\n")
  [packages] = [p for p in sys.path if p.endswith("site-packages")]
  subprocess.run([sys.executable, "-I", "-S", "-c", script,
                  str(tmp_path / "images.pt"), packages], check=True,
                 cwd=tmp_path, env=dict(os.environ,
                                        MLFLOW_TRACKING_URI=promoted_search.uri))
  predicted = torch.load(tmp_path / "images.pt").argmax(1)
  accuracy = (predicted == labels).float().mean().item()
  assert accuracy == pytest.approx(promoted.data.metrics["ema_accuracy"],
                                   abs=1 / len(labels))
