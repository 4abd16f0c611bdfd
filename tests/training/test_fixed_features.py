"""Fixed front ends computed once: the same DP-SGD, run on the head."""

import dataclasses

import numpy as np
import pytest
import torch

from tan_tune.training import augment
from tan_tune.training import canaries
from tan_tune.training import datasets
from tan_tune.training import dp_sgd
from tan_tune.training import fixed_features
from tan_tune.training import models
from tan_tune.training import run_state
from tan_tune.training import trial_config

DIGITS = datasets.DatasetConfig(name="digits")
SCATTERNET = models.ModelConfig(name="scatternet")


def _config(**changes) -> trial_config.TrialConfig:
  return dataclasses.replace(trial_config.TrialConfig(
      dataset=DIGITS, model=SCATTERNET,
      privacy=trial_config.PrivacyConfig(
          batch_size=64, noise_multiplier=1.0, steps=4,
          reference_batch_size=64),
      device="cpu", validation_fraction=0.25, eval_every=2), **changes)


def _model(name: str = "scatternet") -> torch.nn.Module:
  return models.build_model(models.ModelConfig(name=name), (1, 8, 8), 10)


@pytest.mark.parametrize("name", ["scatternet", "scatternet-cnn"])
def test_the_scatternet_declares_its_transform_and_a_cnn_nothing(name):
  scatter = _model(name)
  assert fixed_features.declares(scatter)
  head = fixed_features.head(scatter)
  assert [name for name, _ in head.named_parameters()] == [
      name for name, _ in scatter.named_parameters()]  # Same names.
  assert not fixed_features.declares(_model("small-cnn"))


def test_augmentation_and_canaries_keep_the_per_step_path():
  scatter = _model()
  assert fixed_features.skipped_because(scatter, "none", False) is None
  assert "crop-flip" in fixed_features.skipped_because(scatter, "crop-flip",
                                                       False)
  assert "canaries" in fixed_features.skipped_because(scatter, "none", True)
  assert "no fixed front end" in fixed_features.skipped_because(
      _model("small-cnn"), "none", False)


def test_the_plan_line_says_which_path_and_why():
  once = fixed_features.describe(SCATTERNET, (1, 8, 8), 10, "none", False)
  assert "computed once per example" in once
  every = fixed_features.describe(SCATTERNET, (1, 8, 8), 10, "crop-flip",
                                  False)
  assert "every step" in every and "crop-flip" in every


@pytest.mark.parametrize("name", ["scatternet", "scatternet-cnn"])
def test_ten_dp_sgd_steps_on_the_features_equal_them_on_the_images(name):
  """In float64, with the same sampling and noise generators: the head's
  weights after 10 private steps agree to round-off, the linear head's and
  the CNN head's."""
  data = datasets.load_dataset(DIGITS)
  images, labels = data.train.get_batch(torch.arange(512))
  images = datasets.normaliser(data)(images).double()
  torch.manual_seed(0)
  whole = _model(name).double()
  front = whole[0]
  with torch.no_grad():
    features = torch.cat([front(chunk) for chunk in images.split(100)])
  head = fixed_features.head(_copy(whole, name))

  def train(model, inputs):
    generator = torch.Generator().manual_seed(7)
    sampler = torch.Generator().manual_seed(8)
    optimizer = torch.optim.SGD(model.parameters(), lr=2.0, momentum=0.9)
    step = dp_sgd.DPSGD(model, optimizer, clip_norm=1.0, noise_multiplier=1.0,
                        expected_batch_size=64, generator=generator,
                        clipping="vmap")
    for _ in range(10):
      rows = torch.rand(512, generator=sampler) < 64 / 512
      step.step([(inputs[rows].unsqueeze(1), labels[rows], None)])
    return {name: p.detach() for name, p in model.named_parameters()}

  on_images = train(whole, images)
  on_features = train(head, features)
  assert on_images.keys() == on_features.keys()
  for name, value in on_images.items():
    torch.testing.assert_close(on_features[name], value, rtol=1e-10,
                               atol=1e-12)


def _copy(model: torch.nn.Module, name: str) -> torch.nn.Module:
  copy = _model(name).double()
  copy.load_state_dict(model.state_dict())
  return copy


def test_a_run_trains_the_head_on_features_computed_once():
  run = run_state.RunState(_config())
  assert run.network is not run.model
  assert isinstance(run.train.split, fixed_features.FeatureSplit)
  features, _ = run.train.get_batch(torch.arange(3))
  assert features.shape == (3, 81, 2, 2)
  # They are the front end's output on the normalised images.
  images, _ = run.data.train.get_batch(run.train.indices[:3])
  with torch.no_grad():
    expected = run.model[0](datasets.normaliser(run.data)(images))
  tolerance = 64 * torch.finfo(torch.float32).eps * expected.abs().max()
  torch.testing.assert_close(features, expected, rtol=0, atol=tolerance)
  run.train_step()
  assert set(run.evaluate()) >= {"accuracy", "ema_accuracy"}


def test_a_run_reads_shared_features_and_never_computes_its_own(monkeypatch):
  key = fixed_features.key(DIGITS, SCATTERNET)
  shared = fixed_features.for_networks(DIGITS, [SCATTERNET], ["none"],
                                       torch.device("cpu"))
  assert list(shared) == [key]

  def refuse(*_):
    raise AssertionError("computed again")

  monkeypatch.setattr(fixed_features, "compute", refuse)
  run = run_state.RunState(_config(), shared_features=shared)
  assert run.train.split.computed is shared[key].train


def test_features_are_shared_only_where_some_run_uses_them():
  cpu = torch.device("cpu")
  assert fixed_features.for_networks(DIGITS, [SCATTERNET], ["crop-flip"],
                                     cpu) == {}
  cnn = models.ModelConfig(name="small-cnn")
  assert fixed_features.for_networks(DIGITS, [cnn], ["none"], cpu) == {}
  both = fixed_features.for_networks(DIGITS, [cnn, SCATTERNET, SCATTERNET],
                                     ["none", "crop-flip"], cpu)
  [computed] = both.values()
  assert computed.train.features.shape == (len(
      datasets.load_dataset(DIGITS).train), 81, 2, 2)
  assert computed.train.features.dtype == np.float32


def test_the_key_names_the_dataset_and_the_front_end():
  other_data = dataclasses.replace(DIGITS, seed=1)
  assert (fixed_features.key(DIGITS, SCATTERNET)
          != fixed_features.key(other_data, SCATTERNET))
  # The head's settings change no feature; the transform's scales do.
  assert (fixed_features.key(DIGITS, SCATTERNET) == fixed_features.key(
      DIGITS, dataclasses.replace(SCATTERNET, num_groups=3)))
  assert (fixed_features.key(DIGITS, SCATTERNET) != fixed_features.key(
      DIGITS, dataclasses.replace(SCATTERNET, scales=3)))
  # Nor does the head: the linear and the CNN head share the features.
  assert (fixed_features.key(DIGITS, SCATTERNET) == fixed_features.key(
      DIGITS, dataclasses.replace(SCATTERNET, name="scatternet-cnn")))


@pytest.mark.parametrize("family", ["crop-flip"])
def test_an_augmented_run_keeps_the_whole_model(family):
  run = run_state.RunState(_config(
      augment=augment.AugmentConfig(family, multiplicity=2)))
  assert run.network is run.model


def test_an_audited_run_keeps_the_whole_model():
  run = run_state.RunState(_config(
      privacy=trial_config.PrivacyConfig(batch_size=64, noise_multiplier=1.0,
                                         steps=2),
      validation_fraction=0.0,
      canaries=canaries.CanaryConfig(count=4, mask_seed=1, base=canaries.PUBLIC)))
  assert run.network is run.model


def test_a_cpu_computes_a_chunk_per_thread_with_the_same_result():
  """Two threads, each chunk on one, give exactly the features of one
  thread, in order; torch's thread count is restored after."""
  data = datasets.load_dataset(DIGITS)
  front = _model()[0]
  cpu = torch.device("cpu")
  threads = torch.get_num_threads()
  try:
    torch.set_num_threads(1)
    one = fixed_features.compute(data, front, "k", cpu)
    torch.set_num_threads(2)
    two = fixed_features.compute(data, front, "k", cpu)
    assert torch.get_num_threads() == 2
  finally:
    torch.set_num_threads(threads)
  for split in ("train", "test"):
    assert np.array_equal(getattr(one, split).features,
                          getattr(two, split).features)
    assert np.array_equal(getattr(one, split).labels,
                          getattr(two, split).labels)
