"""A checkpoint file: whole, owner-only, and stripped of its secrets."""

import stat

import torch

from tan_tune.training import checkpoint_file


def test_a_checkpoint_is_written_whole_and_owner_only(tmp_path):
  path = tmp_path / "run" / checkpoint_file.CHECKPOINT_FILE
  checkpoint_file.write(path, {"step": 3, "charge": "train/abc"})
  assert stat.S_IMODE(path.stat().st_mode) == 0o600
  assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
  assert [p.name for p in path.parent.iterdir()] == [path.name]
  assert checkpoint_file.read(path)["step"] == 3
  assert checkpoint_file.charge_of(path) == "train/abc"


def test_stripping_keeps_the_weights_and_drops_every_generator_state(
    tmp_path):
  path = tmp_path / checkpoint_file.CHECKPOINT_FILE
  weights = {"w": torch.arange(3.0)}
  checkpoint_file.write(path, {
      "model": weights, "step": 5, "sampling_rng": torch.ones(8),
      "noise_rng": torch.ones(8), "dropout_rng": torch.ones(8),
      "augment_rng": (1, 2)})
  checkpoint_file.strip_generator_states(path)
  state = checkpoint_file.read(path)
  assert sorted(state) == ["model", "step"]
  assert torch.equal(state["model"]["w"], weights["w"])
  assert stat.S_IMODE(path.stat().st_mode) == 0o600
