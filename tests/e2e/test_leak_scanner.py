"""The leak scanner over the four private flows, run as a user runs them.

For a promotion (crop-flip with AugMult on) that ends registered in MLflow's
Model Registry, a private random search,
`tan-tune train` of a private config and an audit on private data, an
attacker reads every byte left behind: the search folder, the MLflow store
and its artifacts, Ray's session folder and every temp folder (TMPDIR),
HOME, and what the command printed. None of it may hold a secret seed (as
text or as the 8 bytes a generator state starts with; an audit's canary draw
too), the number of a private search's trials or the other trials'
hyper-parameters, an audit's training-set size (it counts the canaries
drawn in), any 8 hex digits of the data's digest, a metric the accountant
does not cover, a time finer than the run's start (a run's end time, an
experiment's last update, an mtime), or anything another local user can
read or write, then or while the flow ran. The registry is read too: the
registered version's privacy card (its description and tags) and its MLflow
Model hold no secret, and its dates, which MLflow sets itself, are older
than the run's first training seed. (A charge replayed for another run is
`test_cli_train.py`'s.)

Another user of the machine `stat`s what the flows leave in their working
directory, whose ctimes no run can set back: `train` releases at a fixed
time (`--release-at`), so every ctime another user reads is its start or
that time; the other flows, whose stores they may stat, say so in one line.
(Through a symlink, to wherever it resolves: `test_symlinked_ray.py`.)
"""

import pathlib
import re
import shutil
import tempfile

import pytest
import torch
import yaml

import leak_scan
import other_users
from tan_tune import api
from tan_tune.ledger import ledger_order
from tan_tune.training import canaries as canaries_lib
from tan_tune.training import datasets
from tan_tune.training import fixed_features
from tan_tune.training import models

# Whole flows through the command line: the end-to-end tier.
pytestmark = [pytest.mark.e2e]

DEMO = pathlib.Path(__file__).resolve().parents[2] / "search_spaces" / "digits-demo.yaml"
# What a private run may publish, by MLflow run kind: DP outputs and their
# accounting (`run_state.PRIVATE_METRICS`), the planned and final eps.
_ALLOWED = {
    "promoted": re.compile(r"(ema_|augtest_)?accuracy|epsilon|step|"
                           r"(planned|final)_epsilon_\w+|final_eps_tan|"
                           r"predicted_\w+|prediction_error"),
    "search": re.compile(r"search_epsilon|reference_eps_tan|"
                         r"reference_epsilon_\w+|released_\w*accuracy|"
                         r"released_validation_score"),
    "ledger-entry": re.compile(r"epsilon"),
    # eps, eps_lb and what it is made of: functions of the final weights and
    # the public canaries.
    "audit": re.compile(r"(audited_)?epsilon|(ema_)?accuracy|"
                        r"(input|gradient)_((fdp_)?(epsilon_lower_bound|"
                        r"ceiling)|guesses|correct)"),
}
# A second of slack after the run's start: the start itself is published.
_START_SLACK = 1.0
# m of each kind in the audit flow.
_CANARIES = 200
# When `train` releases: well after its end (its 20 steps take a few seconds),
# and what it would say past it (`release_time.LATE`).
_RELEASE_SECONDS = 45
_LATE = "was not done by its release time"


def _search_file(work: pathlib.Path, **changes) -> pathlib.Path:
  space = yaml.safe_load(DEMO.read_text())
  space.update(max_concurrent=1, eval_every=10, **changes)
  space["reference"].update(steps=20, noise_multiplier=6.0)
  path = work / f"{space['name']}.yaml"
  path.write_text(yaml.safe_dump(space))
  return path


def _promotion(root: pathlib.Path) -> leak_scan.Flow:
  """A search of one simulated trial with crop-flip and AugMult K = 2 (not
  private, not scanned: run here, on the session's Ray), then its promotion
  on 2 workers, registered (scanned)."""
  work = root / "work"
  hyper = yaml.safe_load(DEMO.read_text())["hyperparameters"]
  hyper.update(augmentation={"kind": "choice", "values": ["crop-flip"]},
               augmult={"kind": "choice", "values": [2]})
  path = _search_file(work, name="leak", num_trials=1, hyperparameters=hyper)
  api.search(path, storage=work / "runs",
             tracking_uri=f"sqlite:///{work}/mlflow.db")
  return leak_scan.run_flow(root, "promote", "runs/leak", "--workers", "2",
                            "--new-ledger", "--register", "leak")


def _private_search(root: pathlib.Path) -> leak_scan.Flow:
  """Every trial a private run at (512, 3.918, 20) of the ScatterNet, on
  features the driver computes once and shares through Ray's object store,
  trained on digits less a validation split of about 20% and scored there
  with noise of standard deviation 2; K ~ logarithmic, mean 2 (at least one
  trial), eps 2.34 for the whole search; its release registered."""
  work = root / "work"
  path = _search_file(
      work, name="secret", tuning_privacy="private_random_search",
      model={"name": "scatternet"},
      trial_count={"distribution": "logarithmic", "mean": 2},
      sampler="random", select_on="validation", validation_fraction=0.2,
      score_noise=2.0, simulation_batch_sizes=[512],
      reference={"batch_size": 512, "noise_multiplier": 3.918, "steps": 20,
                 "target_epsilon": 4},
      hyperparameters={"lr": {"kind": "loguniform", "low": 0.5, "high": 4}})
  return leak_scan.run_flow(root, "search", path.name, "--new-ledger",
                            "--register", "secret")


def _private_train(root: pathlib.Path) -> leak_scan.Flow:
  """A private digits run with crop-flip and AugMult, checkpointed."""
  work = root / "work"
  (work / "run.yaml").write_text(yaml.safe_dump({
      "dataset": {"name": "digits"}, "model": {"name": "small-cnn"},
      "privacy": {"batch_size": 256, "noise_multiplier": 1.2041,
                  "steps": 20},
      "augment": {"family": "crop-flip", "multiplicity": 2},
      "eval_every": 10, "device": "cpu"}))
  return leak_scan.run_flow(root, "train", "run.yaml", "--checkpoint-dir",
                            "checkpoints", "--new-ledger",
                            "--target-epsilon", "8",
                            "--release-at", f"+{_RELEASE_SECONDS}s")


def _private_audit(root: pathlib.Path) -> leak_scan.Flow:
  """An audit on the private training split: 200 canaries of each kind."""
  work = root / "work"
  path = _search_file(work, name="audited")
  return leak_scan.run_flow(root, "audit", path.name, "--base", "private",
                            "--canaries", str(_CANARIES), "--new-ledger",
                            "--target-epsilon", "8")


_FLOWS = {"promote": _promotion, "private-search": _private_search,
          "train": _private_train, "audit": _private_audit}


def _short_folder() -> pathlib.Path:
  """A short sandbox path (Ray's socket paths must fit in 107 bytes) that
  another user may pass through, but not list, to `stat` what the flow
  leaves in its 0755 working directory."""
  folder = pathlib.Path(tempfile.mkdtemp(prefix="leak", dir="/tmp"))
  folder.chmod(0o711)
  return folder


@pytest.fixture(scope="module")
def flows(local_ray):
  """Each flow run once, when a test first needs it, in a sandbox that
  starts as a copy of one warmed up once."""
  del local_ray  # The promotion's search runs on it.
  done, roots = {}, [_short_folder()]
  leak_scan.warm_up(roots[0])

  def get(name: str) -> leak_scan.Flow:
    if name not in done:
      roots.append(_short_folder())
      leak_scan.sandbox(roots[-1], like=roots[0])
      flow = _FLOWS[name](roots[-1])
      assert flow.returncode == 0, flow.output[-4000:].decode(errors="replace")
      assert flow.seeds(), "the spy saw no seed: none was drawn?"
      done[name] = flow
    return done[name]

  yield get
  for root in roots:
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=sorted(_FLOWS))
def flow(request, flows):
  return flows(request.param)


@pytest.fixture(scope="module")
def digits():
  return datasets.load_dataset(datasets.DatasetConfig(name="digits"))


def _kind(tags: dict[str, str]) -> str | None:
  """A run's kind; 'search' for a private search's parent."""
  return ("search" if tags.get("tan_tune.tuning_privacy")
          == "private_random_search" and tags.get("tan_tune.kind") == "search"
          else tags.get("tan_tune.kind"))


def _charged_at(runs) -> float:
  """When the run was charged, in seconds: what came before (imports, a new
  store's set-up) times nothing of it."""
  return min(r["start_time"] / 1000 for r in runs
             if r["tags"].get("tan_tune.kind") == "ledger-entry")


def test_no_secret_seed_is_left_anywhere(flow):
  needles = [form for seed in flow.seeds()
             for form in leak_scan.encodings(seed)]
  assert leak_scan.find_bytes(flow, needles) == []


def test_a_new_ledger_key_sits_in_its_own_file_alone(flow):
  for key in flow.secrets.get(leak_scan.LEDGER_KEY, []):
    holders = [p.read_bytes() for p in flow.written() if key in p.read_bytes()]
    assert holders == [key]
    assert leak_scan.find_bytes(flow, [key.hex().encode()]) == []


def test_nothing_is_readable_by_another_user(flow):
  assert leak_scan.readable_by_others(flow) == []


def test_nothing_was_readable_by_another_user_while_it_ran(flow):
  assert flow.exposed_while_running == []


def test_no_slice_of_the_datas_digest_is_left_anywhere(flow, digits):
  """Neither the digest the ledger published before (for digits
  4ce557df34e0...) nor an unkeyed digest of today's canonical per-example
  digests, in any file of the sandbox, MLflow's database or the terminal."""
  old = leak_scan.old_digits_fingerprint()
  assert old.startswith("4ce557df34e0")
  needles = [window for digest in {old, leak_scan.unkeyed_fingerprint(digits)}
             for window in leak_scan.hex_windows(digest)]
  assert leak_scan.find_bytes(flow, needles, everywhere=True) == []


def test_no_feature_of_the_private_data_is_left_anywhere(flows):
  """The private search's ScatterNet features are private data: no row of
  them (its first 32 bytes) in any file left, MLflow or the terminal."""
  flow = flows("private-search")
  shared = fixed_features.for_networks(
      datasets.DatasetConfig(name="digits"),
      [models.ModelConfig(name="scatternet")], ["none"], torch.device("cpu"))
  [features] = shared.values()
  rows = features.train.features
  needles = [rows[i].tobytes()[:32] for i in range(0, len(rows), 50)]
  assert leak_scan.find_bytes(flow, needles, everywhere=True) == []


def test_no_metric_outside_the_allow_list(flow):
  for run in leak_scan.mlflow_runs(flow):
    tags = run["tags"]
    kind = _kind(tags)
    if kind not in _ALLOWED:
      assert tags.get("tan_tune.private") != "true", tags
      continue
    for key, _ in run["metrics"]:
      assert _ALLOWED[kind].fullmatch(key), (kind, key)


def test_no_time_finer_than_the_runs_start(flow):
  runs = leak_scan.mlflow_runs(flow)
  start = _charged_at(runs)
  for run in runs:
    if run["tags"].get("tan_tune.kind") in ("promoted", "search"):
      latest = run["start_time"] + _START_SLACK * 1000
      assert all(t <= latest for _, t in run["metrics"]), run
  assert leak_scan.timestamps_within(
      flow, start + _START_SLACK, flow.ended) == []


def test_no_private_run_records_its_end(flow):
  """An end time is the start plus the duration, and durations count
  trials, canaries, steps."""
  for run in leak_scan.mlflow_runs(flow):
    if _kind(run["tags"]) in _ALLOWED:
      assert run["end_time"] in (None, run["start_time"]), (
          _kind(run["tags"]), run["end_time"] - run["start_time"])


def test_nothing_is_dated_after_the_runs_start(flow):
  """No experiment's last update and no mtime of what the flow made or
  changed is later than the start (the sandbox's three folders themselves
  stand for HOME, /tmp and a working directory, which everything touches)."""
  latest = _charged_at(leak_scan.mlflow_runs(flow)) + _START_SLACK
  assert leak_scan.experiments_updated(flow, latest, flow.ended) == []
  assert leak_scan.modified_after(flow, latest) == []


def test_a_private_search_leaves_neither_its_count_nor_other_trials(flows):
  flow = flows("private-search")
  [count] = flow.secrets["trial_count"]
  trials = flow.secrets["trial_params"]
  assert len(trials) == count >= 1
  released = yaml.safe_load(
      (flow.work / "runs" / "secret" / "best.json").read_text())["params"]
  others = [t["lr"] for t in trials if t["lr"] != released["lr"]]
  needles = [form for lr in others for form in leak_scan.encodings(lr)]
  # Ray's trial names and ids count the trials (train_trial_<id>_00003_...).
  needles += [b"train_trial_", b"_00000", b"Number of trials"]
  assert leak_scan.find_bytes(flow, needles) == []
  state = (flow.work / "runs" / "secret" / "tan_tune_search.json").read_text()
  assert "trial_count" not in state


def test_a_private_search_leaves_no_split_and_no_score_but_the_released(
    flows, digits):
  """Which examples the trials held out (their key, their mask), the count
  of correct predictions under each score's noise, and every trial's noisy
  score but the released one's stay inside the run."""
  flow = flows("private-search")
  [key] = set(flow.secrets["split_key"])  # One split for the whole search.
  [mask] = set(flow.secrets["split_mask"])
  [size] = set(flow.secrets["split_size"])
  scores = flow.secrets["score"]
  assert len(scores) == len(flow.secrets["trial_params"]) >= 1
  released = yaml.safe_load(
      (flow.work / "runs" / "secret" / "best.json").read_text())["value"]
  assert released == max(scores)
  needles = [*leak_scan.encodings(key), *leak_scan.encodings(mask)]
  expected_size = 0.2 * digits.num_train
  for count in flow.secrets["score_count"]:
    needles += leak_scan.encodings(count / size)  # Its accuracy, un-noised.
    needles += leak_scan.encodings(count / expected_size)
  for score in scores:
    if score != released:
      needles += leak_scan.encodings(score)
  assert leak_scan.find_bytes(flow, needles) == []


def test_an_audit_prints_no_training_set_size(flows, digits):
  """N_a = N + the canaries drawn in: it tells how many were, the secret the
  audit's eps_lb rests on."""
  flow = flows("audit")
  [mask_seed] = flow.secrets["tan_tune.promote.audit_plan"]
  drawn_in = canaries_lib.CanaryConfig(count=_CANARIES,
                                       mask_seed=mask_seed).included()
  size = digits.num_train + sum(int(m.sum()) for m in drawn_in.values())
  printed = re.compile(
      rf"(?<!\d)(?<!\d,)({size}|{size:,})(?!\d|,\d)".encode())
  assert not printed.search(flow.output), size


# The first secret a registered flow draws after its version is made: a
# promotion's training seeds, a private search's number of trials.
_FIRST_DRAW = {"promote": "tan_tune.training.seeds",
               "private-search": "trial_count"}


@pytest.mark.parametrize("name", sorted(_FIRST_DRAW))
def test_the_registry_is_dated_before_training_started(flows, name):
  """MLflow dates a registered version itself: made when the run starts,
  its dates cannot tell how long training took, nor how many trials ran."""
  flow = flows(name)
  found = leak_scan.registry(flow)
  assert found["aliases"] == [("candidate", 1)]
  assert found["times"]
  assert max(found["times"]) < flow.drawn_at[_FIRST_DRAW[name]]


@pytest.mark.parametrize("name", sorted(_FIRST_DRAW))
def test_the_registry_holds_the_card_and_no_secret(flows, digits, name):
  flow = flows(name)
  found = leak_scan.registry(flow)
  [card] = [d for d in found["descriptions"]
            if d and d.startswith("# Privacy card")]
  assert "example-level" in card
  assert {key.split(".")[0] for key, _ in found["tags"]} == {"privacy",
                                                             "tan_tune"}
  text = "\n".join([*filter(None, found["descriptions"]),
                    *(value for _, value in found["tags"])]).encode()
  needles = [form for seed in flow.seeds()
             for form in leak_scan.encodings(seed)]
  needles += leak_scan.hex_windows(leak_scan.unkeyed_fingerprint(digits))
  assert [n for n in needles if n in text] == []
  # The version's MLflow Model lies in the sandbox: the scans above read it.
  # Beside it, the ledger's order: one version per charge, naming its entry.
  [source] = [source for model, source in found["sources"]
              if model != ledger_order.ORDER_MODEL]
  assert len(found["sources"]) == 2
  run_id = source.split("/")[1]
  [model] = (flow.work / "mlartifacts").rglob(f"{run_id}/**/MLmodel")
  assert model in flow.written()


def test_a_private_search_releases_its_weights_as_an_mlflow_model(flows):
  flow = flows("private-search")
  [model] = (flow.work / "mlartifacts").rglob("mlflow_model/MLmodel")
  assert "search_epsilon" in model.read_text()
  assert "privacy_card" in model.read_text()
  [card] = (flow.work / "mlartifacts").rglob("privacy_card.md")
  # The tighter of the selection's two bounds, named.
  assert "pld-selection-profile".upper() in card.read_text()


@pytest.mark.parametrize("name", sorted(_FLOWS))
def test_another_user_reads_no_ctime_between_the_start_and_the_release(
    flows, name):
  """What another user may `stat` in the working directory (mlflow.db, the
  ledger key's folder, the artifacts', the search's and the checkpoints'
  folders) keeps the ctime of its last change, which no seal sets back.
  `train`, released at a fixed time, leaves the ctimes of its start or of
  that time alone; the other flows said in one line that theirs would date
  their end."""
  flow = flows(name)
  start = _charged_at(leak_scan.mlflow_runs(flow)) + _START_SLACK
  changed = {path: ctime for path, ctime in
             other_users.ctimes_seen_by_others(flow.work).items()
             if ctime > start}
  assert "mlflow.db" in changed
  output = flow.output.decode(errors="replace")
  if name == "train":  # Its release time counts from after the flow began.
    release = flow.started + _RELEASE_SECONDS
    assert _LATE not in output
    assert {p: c - release for p, c in changed.items() if c < release} == {}
    return
  [said] = [line for line in output.splitlines()
            if "warning: other users can stat" in line]
  assert f"{flow.work}/mlflow.db" in said and "--release-at" in said
