"""Tests of `tan-tune train`."""

import json
import re
import stat

import pytest

from tan_tune.cli import main as cli
from tan_tune.ledger import ledger as ledger_lib
from tan_tune.training import checkpoint_file
import mlflow_stores
from train_configs import BASE

EXAMPLE = "examples/train-digits.yaml"

pytestmark = pytest.mark.usefixtures("migrated_mlflow_db")  # A new store each.


def _ledger(tmp_path, *more):
  """A private run's ledger: a fresh store, started by this run."""
  return ["--tracking-uri", mlflow_stores.store(tmp_path), *more]


def _first(tmp_path):
  return _ledger(tmp_path, "--new-ledger", "--target-epsilon", "8")


@pytest.mark.slow
def test_example_config_trains_privately(tmp_path, capsys):
  assert cli.main(["train", EXAMPLE, "--json", *_first(tmp_path)]) == 0
  metrics = json.loads(capsys.readouterr().out)
  assert metrics["step"] == 100
  assert metrics["private"] is True
  assert metrics["epsilon"] <= 8.0
  assert metrics["ema_accuracy"] >= 0.88


def _write(tmp_path, text):
  path = tmp_path / "run.yaml"
  path.write_text(text)
  return str(path)


@pytest.mark.parametrize(
    "edit, message",
    [
        (("batch_size: 64", "batch_sise: 64"), 'did you mean "batch_size"'),
        (("batch_size: 64", "batch_size: 5000"), "privacy.batch_size"),
        (("name: small-cnn", "name: resnet-9000"), "model.name"),
        (("name: digits", "name: svhn"), "name"),
        (("steps: 4", "steps: four"), "privacy.steps"),
    ],
)
def test_bad_config_is_one_line_exit_2(tmp_path, capsys, edit, message):
  with pytest.raises(SystemExit) as exit_info:
    cli.main(["train", _write(tmp_path, BASE.replace(*edit))])
  assert exit_info.value.code == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and message in err[0]


def test_diverging_run_exits_1_with_a_message(tmp_path, capsys):
  text = BASE.replace("noise_multiplier: 1.0", "noise_multiplier: 0.0,"
                      " private: false") + "optim: {lr: 1.0e+12, ema_decay: null}\n"
  text = text.replace("steps: 4", "steps: 40")
  with pytest.raises(SystemExit) as exit_info:
    cli.main(["train", _write(tmp_path, text), "--json"])
  assert exit_info.value.code == 1
  assert "diverged" in capsys.readouterr().err


def test_a_private_run_that_diverges_names_no_step(tmp_path, capsys):
  """The step it stopped at was the first secret batch that drew a bad
  row: it says it diverged, charged, and stops at an evaluation."""
  text = BASE + "optim: {lr: 1.0e+38, ema_decay: null}\n"
  with pytest.raises(SystemExit) as exit_info:
    cli.main(["train", _write(tmp_path, text), *_first(tmp_path)])
  assert exit_info.value.code == 1
  err = capsys.readouterr().err.strip().splitlines()
  assert err[-1] == (
      "tan-tune train: error: the weights are not finite: the run diverged"
      " and was stopped (lower lr, or check the data)")
  assert not [line for line in err if re.search(r"step \d", line)]
  assert len(_charges(tmp_path)) == 1  # Charged before it trained.


@pytest.mark.slow
def test_checkpoint_dir_resumes_a_finished_run(tmp_path, capsys):
  config = _write(tmp_path, BASE)
  checkpoints = tmp_path / "ckpt"
  assert cli.main(["train", config, "--checkpoint-dir", str(checkpoints),
                   "--json", *_first(tmp_path)]) == 0
  first = json.loads(capsys.readouterr().out)
  assert cli.main(["train", config, "--checkpoint-dir", str(checkpoints),
                   "--json", *_ledger(tmp_path)]) == 0
  assert json.loads(capsys.readouterr().out) == first
  # One attempt, however often resumed: charged once.
  [entry] = ledger_lib.Ledger(mlflow_stores.store(tmp_path)).entries()
  assert entry.promotion.startswith("train/")


def _charges(tmp_path):
  return ledger_lib.Ledger(mlflow_stores.store(tmp_path)).entries()


def test_a_deleted_checkpoint_means_a_new_charge(tmp_path):
  config = _write(tmp_path, BASE)
  checkpoints = ["--checkpoint-dir", str(tmp_path / "ck")]
  assert cli.main(["train", config, *checkpoints, *_first(tmp_path)]) == 0
  (tmp_path / "ck" / checkpoint_file.CHECKPOINT_FILE).unlink()
  assert cli.main(["train", config, *checkpoints, *_ledger(tmp_path)]) == 0
  # A second full run: charged again, under a new attempt.
  first, second = _charges(tmp_path)
  assert first.promotion != second.promotion


def test_a_copied_charge_pays_for_no_other_config(tmp_path, capsys):
  """The attack: the first run's `ledger_entry.json` (the attempt file of
  earlier versions) copied beside an edited config, sigma 0.3 and S = 300
  (eps 790), ran uncharged."""
  config = _write(tmp_path, BASE)
  assert cli.main(["train", config, "--checkpoint-dir", str(tmp_path / "ck"),
                   *_first(tmp_path)]) == 0
  [charge] = _charges(tmp_path)
  copy = tmp_path / "copy"
  copy.mkdir()
  (copy / "ledger_entry.json").write_text(
      json.dumps({"attempt": charge.promotion.split("/")[1]}))
  edited = _write(tmp_path, BASE.replace("noise_multiplier: 1.0",
                                         "noise_multiplier: 0.3").replace(
      "steps: 4", "steps: 300").replace("eval_every: 2", "eval_every: 3"))
  capsys.readouterr()
  with pytest.raises(SystemExit) as exit_info:
    cli.main(["train", edited, "--checkpoint-dir", str(copy),
              *_ledger(tmp_path)])
  assert exit_info.value.code == 2
  assert "has already spent eps" in capsys.readouterr().err
  assert not (copy / checkpoint_file.CHECKPOINT_FILE).exists()
  assert _charges(tmp_path) == [charge]


def test_a_checkpoint_resumes_only_the_config_it_was_charged_for(
    tmp_path, capsys):
  assert cli.main(["train", _write(tmp_path, BASE), "--checkpoint-dir",
                   str(tmp_path / "ck"), *_first(tmp_path)]) == 0
  edited = _write(tmp_path, BASE.replace("noise_multiplier: 1.0",
                                         "noise_multiplier: 0.9"))
  capsys.readouterr()
  with pytest.raises(SystemExit) as exit_info:
    cli.main(["train", edited, "--checkpoint-dir", str(tmp_path / "ck"),
              *_ledger(tmp_path)])
  assert exit_info.value.code == 2
  [line] = capsys.readouterr().err.strip().splitlines()
  assert "--checkpoint-dir" in line and "Restore the config" in line
  assert len(_charges(tmp_path)) == 1


def test_the_epsilon_printed_names_its_sampler(tmp_path, capsys):
  path = _write(tmp_path, BASE.replace(
      "steps: 4}", "steps: 4, sampling: fixed, noise_multiplier: 3.0}"
  ).replace("noise_multiplier: 1.0, ", ""))
  assert cli.main(["train", path, *_first(tmp_path)]) == 0
  out = capsys.readouterr().out
  assert ("(RDP, add/remove-one, fixed-size batches of 64 without"
          " replacement)") in out


def test_a_private_run_is_charged_before_it_trains_and_refused_over_budget(
    tmp_path, capsys):
  config = _write(tmp_path, BASE.replace("noise_multiplier: 1.0",
                                         "noise_multiplier: 0.7"))
  assert cli.main(["train", config, "--json", *_ledger(
      tmp_path, "--new-ledger", "--target-epsilon", "2.5")]) == 0
  [entry] = ledger_lib.Ledger(mlflow_stores.store(tmp_path)).entries()
  assert entry.budget == 2.5
  assert entry.epsilon == pytest.approx(2.379, abs=1e-3)
  capsys.readouterr()
  # A second run on the same data composes to 2.72 > 2.5: refused first.
  with pytest.raises(SystemExit) as exit_info:
    cli.main(["train", config, "--json", *_ledger(tmp_path)])
  assert exit_info.value.code == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "has already spent eps" in err[0]
  assert len(ledger_lib.Ledger(mlflow_stores.store(tmp_path)).entries()) == 1


@pytest.mark.parametrize("flags, message", [
    ((), "--new-ledger: 'unset'"),
    (("--new-ledger",), "--target-epsilon: None .*promote"),
])
def test_a_fresh_store_needs_the_datasets_ledger_and_budget_named(
    tmp_path, capsys, flags, message):
  with pytest.raises(SystemExit) as exit_info:
    cli.main(["train", _write(tmp_path, BASE), *_ledger(tmp_path, *flags)])
  assert exit_info.value.code == 2
  [line] = capsys.readouterr().err.strip().splitlines()
  assert re.search(message, line), line
  assert ledger_lib.Ledger(mlflow_stores.store(tmp_path)).entries() == []


def test_a_finished_private_run_keeps_no_generator_state_or_rate(
    tmp_path, capsys):
  """The first 8 bytes of a generator state are its seed: with the sampling
  and noise seeds, retraining replays the run."""
  checkpoints = tmp_path / "ckpt"
  assert cli.main(["train", _write(tmp_path, BASE), "--checkpoint-dir",
                   str(checkpoints), *_first(tmp_path)]) == 0
  state = checkpoint_file.load(checkpoints / checkpoint_file.CHECKPOINT_FILE)
  assert state["step"] == 4 and "model" in state
  assert not [key for key in state if key.endswith("_rng")]
  for path in [checkpoints, *checkpoints.iterdir()]:
    assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, path
  # The progress bar moved at evaluations only, with no rate and no clock.
  bar = [line for line in capsys.readouterr().err.splitlines() if "%|" in line]
  assert "4/4" in bar[-1] and not re.search(r"\d+:\d\d|/s\b|s/", bar[-1])


def test_a_finished_private_run_leaves_with_its_privacy_card(tmp_path,
                                                            capsys):
  """Beside the checkpoint, owner-only: eps at delta per accountant, the
  sampler, the ledger with this run, what is released, how the
  hyper-parameters were chosen; a run without privacy leaves none."""
  checkpoints = tmp_path / "ckpt"
  assert cli.main(["train", _write(tmp_path, BASE), "--checkpoint-dir",
                   str(checkpoints), *_first(tmp_path), "--json"]) == 0
  metrics = json.loads(capsys.readouterr().out)
  card = json.loads((checkpoints / "privacy_card.json").read_text())
  assert card["epsilon"]["rdp"] == pytest.approx(metrics["epsilon"])
  assert set(card["epsilon"]) == {"rdp", "prv", "pld"}
  assert card["triplet"]["B"] == 64 and card["triplet"]["S"] == 4
  assert card["sampling"]["sampler"] == "poisson" and card["sampling"]["matches"]
  assert card["clipping"]["engine"] == metrics["clipping"]
  assert card["ledger"]["composed_epsilon"] == pytest.approx(
      metrics["epsilon"])  # The store's first run.
  assert card["released"]["weights"].startswith("the final checkpoint only")
  assert card["tuning"]["mode"] == "given" and card["run_id"] is None
  markdown = (checkpoints / "privacy_card.md").read_text()
  assert markdown.startswith("# Privacy card: (") and "MLflow run" not in markdown
  assert "**Audit**: not looked up" in markdown
  for name in ("privacy_card.json", "privacy_card.md"):
    assert stat.S_IMODE((checkpoints / name).stat().st_mode) & 0o077 == 0
  assert cli.main(["train", _write(tmp_path, BASE), "--checkpoint-dir",
                   str(checkpoints), *_ledger(tmp_path)]) == 0  # Resumed.
  assert f"privacy card: {checkpoints / 'privacy_card.md'}" in (
      capsys.readouterr().out)
  public = BASE.replace("noise_multiplier: 1.0", "noise_multiplier: 0, private: false")
  assert cli.main(["train", _write(tmp_path, public), "--checkpoint-dir",
                   str(tmp_path / "public")]) == 0
  assert not list((tmp_path / "public").glob("privacy_card.*"))


def test_a_private_run_reports_at_most_about_100_evaluations(tmp_path, capsys):
  config = BASE.replace("steps: 4", "steps: 300")
  with pytest.raises(SystemExit) as exit_info:
    cli.main(["train", _write(tmp_path, config), *_first(tmp_path)])
  assert exit_info.value.code == 2
  assert "eval_every: 2 is not allowed; at least 3 = ceil(S / 100)" in (
      capsys.readouterr().err)
