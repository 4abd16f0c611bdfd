"""One charge, one run, one place: the attacks of issue 59 on `tan-tune train`.

A private run is killed after its first checkpoint (step 2 of 4); what its
folder holds is then copied, edited or forged, and resumed. Each attack
ends with one ledger entry, at most one released model, and the others
refused with a one-line reason.
"""

import io
import json
import shutil

import pytest
import torch

from tan_tune.cli import main as cli
from tan_tune.ledger import custody
from tan_tune.ledger import ledger as ledger_lib
from tan_tune.training import checkpoint_file
from tan_tune.training import run_state
import mlflow_stores
from train_configs import BASE  # A private digits run of 4 steps.

pytestmark = pytest.mark.usefixtures("migrated_mlflow_db")

CARD = "privacy_card.md"


class _Killed(Exception):
  """The run's process dies after its first checkpoint."""


def _config(tmp_path, text=BASE, name="run.yaml"):
  path = tmp_path / name
  path.write_text(text)
  return str(path)


def _train(tmp_path, config, folder, *more):
  return cli.main(["train", config, "--checkpoint-dir", str(folder),
                   "--tracking-uri", mlflow_stores.store(tmp_path), *more])


def _refused(tmp_path, capsys, config, folder, *more):
  """The one line `train` is refused with (exit status 2)."""
  capsys.readouterr()
  with pytest.raises(SystemExit) as exit_info:
    _train(tmp_path, config, folder, *more)
  assert exit_info.value.code == 2
  [line] = capsys.readouterr().err.strip().splitlines()
  return line


def _killed_run(tmp_path, monkeypatch, folder):
  """A private run charged, then killed after its checkpoint at step 2."""
  save = run_state.RunState.save

  def save_then_die(run, directory):
    save(run, directory)
    raise _Killed

  monkeypatch.setattr(run_state.RunState, "save", save_then_die)
  with pytest.raises(_Killed):
    _train(tmp_path, _config(tmp_path), folder, "--new-ledger",
           "--target-epsilon", "8")
  monkeypatch.setattr(run_state.RunState, "save", save)


def _entries(tmp_path):
  return ledger_lib.Ledger(mlflow_stores.store(tmp_path)).entries()


def test_a_killed_run_resumes_from_its_checkpoint_charged_once(
    tmp_path, capsys, monkeypatch):
  a = tmp_path / "A"
  _killed_run(tmp_path, monkeypatch, a)
  steps = []
  train_step = run_state.RunState.train_step
  monkeypatch.setattr(run_state.RunState, "train_step",
                      lambda run: steps.append(train_step(run)))
  capsys.readouterr()
  assert _train(tmp_path, _config(tmp_path), a, "--json") == 0
  assert json.loads(capsys.readouterr().out)["step"] == 4
  assert len(steps) == 2  # Steps 3 and 4: resumed at step 2.
  assert len(_entries(tmp_path)) == 1


def test_copies_of_a_running_checkpoint_release_nothing(
    tmp_path, capsys, monkeypatch):
  """The fork: copies C (same config) and G (clip norm 3) of A's checkpoint
  are refused; A alone finishes and releases; its old checkpoint put back
  in A after it finished trains no more."""
  a, c, g = (tmp_path / name for name in "ACG")
  _killed_run(tmp_path, monkeypatch, a)
  mid_run = (a / checkpoint_file.CHECKPOINT_FILE).read_bytes()
  for copy in (c, g):
    shutil.copytree(a, copy)
  line = _refused(tmp_path, capsys, _config(tmp_path), c)
  assert "runs in" in line and str(a.resolve()) in line
  edited = _config(tmp_path, BASE.replace("steps: 4}", "steps: 4,"
                                          " clip_norm: 3.0}"), "g.yaml")
  line = _refused(tmp_path, capsys, edited, g)
  assert "privacy.clip_norm: 3.0 (paid for: 1.0)" in line
  assert _train(tmp_path, _config(tmp_path), a) == 0
  (a / checkpoint_file.CHECKPOINT_FILE).write_bytes(mid_run)
  line = _refused(tmp_path, capsys, _config(tmp_path), a)
  assert "finished" in line
  assert [p.name for p in tmp_path.glob("*/" + CARD)] == [CARD]
  assert (a / CARD).exists()
  assert len(_entries(tmp_path)) == 1


def _forge(path, **state_edits):
  """A checkpoint's state edited in a few lines of torch, seal kept."""
  content = path.read_bytes()
  head = checkpoint_file.header(path)
  prefix = content[:content.index(b"PK\x03\x04")]  # torch's zip starts.
  state = checkpoint_file.load(path)
  state.update(state_edits)
  buffer = io.BytesIO()
  torch.save(state, buffer)
  path.write_bytes(prefix + buffer.getvalue())
  assert checkpoint_file.header(path) == head


def test_a_forged_checkpoint_is_refused_before_it_trains(tmp_path, capsys):
  """Step 0 and fresh generator states in a finished run's checkpoint would
  train 4 new steps on no new charge; unsealed, likewise."""
  a = tmp_path / "A"
  config = _config(tmp_path)
  assert _train(tmp_path, config, a, "--new-ledger", "--target-epsilon",
                "8") == 0
  path = a / checkpoint_file.CHECKPOINT_FILE
  fresh = torch.Generator().get_state()
  _forge(path, step=0, sampling_rng=fresh, noise_rng=fresh,
         dropout_rng=fresh, augment_rng=1)
  line = _refused(tmp_path, capsys, config, a)
  assert "seal does not match" in line
  state = checkpoint_file.load(path)
  torch.save(state, path)  # Unsealed: no charge names it.
  line = _refused(tmp_path, capsys, config, a)
  assert "--checkpoint-dir" in line and "(none named)" in line
  assert len(_entries(tmp_path)) == 1


@pytest.mark.parametrize("edit, field", [
    (("device: cpu", "device: cpu\noptim: {lr: 3.0}"), "optim.lr: 3.0"),
    (("device: cpu", "device: cpu\noptim: {momentum: 0.5}"),
     "optim.momentum: 0.5"),
])
def test_an_edit_on_resume_is_refused_never_ignored(
    tmp_path, capsys, monkeypatch, edit, field):
  """The optimiser's restored state kept the old lr and momentum: a fork
  with lr 3 equalled the original, and nothing said so."""
  a = tmp_path / "A"
  _killed_run(tmp_path, monkeypatch, a)
  line = _refused(tmp_path, capsys, _config(tmp_path, BASE.replace(*edit)), a)
  assert field in line and "never ignored" in line
  assert _train(tmp_path, _config(tmp_path), a) == 0  # As charged: resumes.
  assert len(_entries(tmp_path)) == 1


def test_a_moved_run_resumes_with_move_from_and_retires_the_old_folder(
    tmp_path, capsys, monkeypatch):
  a, b = tmp_path / "A", tmp_path / "B"
  _killed_run(tmp_path, monkeypatch, a)
  shutil.copytree(a, b)
  config = _config(tmp_path)
  assert "runs in" in _refused(tmp_path, capsys, config, b)
  line = _refused(tmp_path, capsys, config, b, "--move-from", str(b))
  assert "--move-from" in line
  assert _train(tmp_path, config, b, "--move-from", str(a)) == 0
  assert not (a / checkpoint_file.CHECKPOINT_FILE).exists()
  assert (b / CARD).exists()
  [entry] = _entries(tmp_path)
  ledger = ledger_lib.Ledger(mlflow_stores.store(tmp_path))
  assert custody._records(ledger, entry.promotion) == {
      "place.0": custody.place(a), "place.1": custody.place(b),
      "finished": custody.place(b)}


def test_a_folder_in_use_is_refused_and_a_refused_new_folder_left_none(
    tmp_path, capsys):
  a = tmp_path / "A"
  with custody.held(a, "--checkpoint-dir"):
    line = _refused(tmp_path, capsys, _config(tmp_path), a, "--new-ledger",
                    "--target-epsilon", "8")
    assert "another process is running in it" in line
  assert not a.exists() and _entries(tmp_path) == []
  fresh = tmp_path / "fresh"
  _refused(tmp_path, capsys, _config(tmp_path), fresh)  # No --new-ledger.
  assert not fresh.exists()
