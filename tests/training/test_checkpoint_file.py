"""A checkpoint file: whole, owner-only, sealed, and stripped of its secrets."""

import io
import stat

import pytest
import torch

from tan_tune.training import checkpoint_file

SEAL = checkpoint_file.Seal("train/abc", b"k" * 32, {"seed": 0})


def test_a_checkpoint_is_written_whole_and_owner_only(tmp_path):
  path = tmp_path / "run" / checkpoint_file.CHECKPOINT_FILE
  checkpoint_file.write(path, {"step": 3})
  assert stat.S_IMODE(path.stat().st_mode) == 0o600
  assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
  assert [p.name for p in path.parent.iterdir()] == [path.name]
  assert checkpoint_file.read(path)["step"] == 3
  assert checkpoint_file.header(path) is None


def test_a_sealed_checkpoint_opens_under_its_seal_alone(tmp_path):
  path = tmp_path / checkpoint_file.CHECKPOINT_FILE
  checkpoint_file.write(path, {"step": 3, "model": torch.ones(2)}, SEAL)
  assert checkpoint_file.header(path) == {
      "charge": "train/abc", "step": 3, "config": {"seed": 0}}
  assert checkpoint_file.read(path, SEAL)["step"] == 3
  assert checkpoint_file.verified_header(path, SEAL)["step"] == 3
  other = checkpoint_file.Seal("train/abc", b"x" * 32)
  with pytest.raises(checkpoint_file.CheckpointRefused, match="does not"):
    checkpoint_file.read(path, other)
  with pytest.raises(checkpoint_file.CheckpointRefused, match="sealed"):
    checkpoint_file.read(path)  # Not without its key.


def _forged(path, edit):
  """The attack of issue 59: a checkpoint's state edited in a few lines of
  torch (step 0, fresh generator states) and written back, seal and all."""
  content = path.read_bytes()
  magic = checkpoint_file.MAGIC
  length = int.from_bytes(content[len(magic):len(magic) + 4], "big")
  prefix = len(magic) + 4 + length + 32
  state = torch.load(io.BytesIO(content[prefix:]), weights_only=False)
  edit(state)
  buffer = io.BytesIO()
  torch.save(state, buffer)
  path.write_bytes(content[:prefix] + buffer.getvalue())


@pytest.mark.parametrize("edit", [
    lambda state: state.update(step=0),
    lambda state: state.update(noise_rng=torch.zeros(8, dtype=torch.uint8)),
])
def test_an_edited_state_is_refused_before_it_is_unpickled(tmp_path, edit,
                                                           monkeypatch):
  path = tmp_path / checkpoint_file.CHECKPOINT_FILE
  checkpoint_file.write(path, {"step": 5, "noise_rng": torch.ones(8)}, SEAL)
  _forged(path, edit)
  loads = []
  monkeypatch.setattr(torch, "load", lambda *a, **k: loads.append(a))
  with pytest.raises(checkpoint_file.CheckpointRefused, match="does not"):
    checkpoint_file.read(path, SEAL)
  assert loads == []


def test_an_unsealed_checkpoint_is_refused_by_a_private_run(tmp_path):
  path = tmp_path / checkpoint_file.CHECKPOINT_FILE
  checkpoint_file.write(path, {"step": 0})
  with pytest.raises(checkpoint_file.CheckpointRefused, match="no seal"):
    checkpoint_file.read(path, SEAL)


def test_stripping_keeps_the_weights_and_drops_every_generator_state(
    tmp_path):
  path = tmp_path / checkpoint_file.CHECKPOINT_FILE
  weights = {"w": torch.arange(3.0)}
  checkpoint_file.write(path, {
      "model": weights, "step": 5, "sampling_rng": torch.ones(8),
      "noise_rng": torch.ones(8), "dropout_rng": torch.ones(8),
      "augment_rng": (1, 2)}, SEAL)
  checkpoint_file.strip_generator_states(path, SEAL)
  state = checkpoint_file.read(path, SEAL)
  assert sorted(state) == ["model", "step"]
  assert torch.equal(state["model"]["w"], weights["w"])
  assert stat.S_IMODE(path.stat().st_mode) == 0o600
