"""Tests of run_trial: accuracy on digits, resume, privacy flags, bad input."""

import dataclasses
import math
import shutil

import numpy as np
from PIL import Image
import pytest
import torch
from torch import nn

from tan_tune.errors import ConfigError
from tan_tune.privacy import accounting
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.privacy.clipping_bound import JlBound
from tan_tune.privacy.sampling_scheme import SamplingScheme
from tan_tune.training import augment
from tan_tune.training import datasets
from tan_tune.training import models
from tan_tune.training import run_state
from tan_tune.training import sampling
from tan_tune.training import seeds as seeds_lib
from tan_tune.training import trial
from tan_tune.training import trial_config

DIGITS_N = 1437


def _config(clipping="auto", **privacy):
  defaults = dict(batch_size=64, noise_multiplier=1.0, steps=12)
  defaults.update(privacy)
  return trial_config.TrialConfig(
      dataset=datasets.DatasetConfig("digits"),
      model=models.ModelConfig("small-cnn"),
      privacy=trial_config.PrivacyConfig(**defaults),
      optim=trial_config.OptimConfig(lr=1.0, momentum=0.5, dampening=0.1,
                              ema_decay=0.9),
      augment=augment.AugmentConfig("crop-flip", multiplicity=2),
      eval_every=4,
      device="cpu",
      clipping=clipping,
  )


@pytest.mark.slow
def test_non_private_digits_reaches_95_percent():
  config = trial_config.TrialConfig(
      dataset=datasets.DatasetConfig("digits"),
      model=models.ModelConfig("small-cnn"),
      privacy=trial_config.PrivacyConfig(64, 0.0, 300, private=False),
      optim=trial_config.OptimConfig(lr=0.1, ema_decay=0.99),
      eval_every=300,
      device="cpu",
  )
  metrics = trial.run_trial(config).metrics
  assert metrics["accuracy"] >= 0.95
  assert metrics["private"] is False and metrics["epsilon"] == math.inf


@pytest.mark.slow
def test_private_digits_at_eps_8_reaches_88_percent():
  steps, batch_size = 100, 256
  sigma = accounting.calibrate_sigma(DIGITS_N, batch_size, steps, 8.0)
  config = trial_config.TrialConfig(
      dataset=datasets.DatasetConfig("digits"),
      model=models.ModelConfig("small-cnn"),
      privacy=trial_config.PrivacyConfig(batch_size, sigma, steps),
      optim=trial_config.OptimConfig(lr=2.0, ema_decay=0.9),
      eval_every=steps,
      device="cpu",
  )
  metrics = trial.run_trial(config).metrics
  assert metrics["epsilon"] <= 8.0  # RDP, delta = 1/N.
  assert metrics["accountant"] == "rdp" and metrics["private"] is True
  assert max(metrics["accuracy"], metrics["ema_accuracy"]) >= 0.88


def _weights(directory):
  state = torch.load(directory / trial.CHECKPOINT_FILE, weights_only=False)
  return state["model"], state["ema"], state["history"]


class _Killed(Exception):
  """Stands for the process being killed mid-run."""


def _kill_after(last_step):
  def on_step(step):
    if step == last_step:
      raise _Killed()
  return on_step


@pytest.mark.slow
@pytest.mark.parametrize("sampling", [
    {}, {"sampling": "truncated-poisson", "truncation_stds": 0.5},
    {"sampling": "fixed"}])
def test_a_resumed_run_ends_with_the_same_weights(tmp_path, sampling):
  # A simulation: its public seeds let an uninterrupted run be compared.
  config = _config(reference_batch_size=512, **sampling)
  trial.run_trial(config, checkpoint_dir=tmp_path / "whole")

  with pytest.raises(_Killed):
    trial.run_trial(config, checkpoint_dir=tmp_path / "cut",
                    on_step=_kill_after(6))
  assert _weights(tmp_path / "cut")[2][-1]["step"] == 4  # Last checkpoint.
  resumed = trial.run_trial(config, checkpoint_dir=tmp_path / "cut")

  whole_model, whole_ema, whole_history = _weights(tmp_path / "whole")
  cut_model, cut_ema, _ = _weights(tmp_path / "cut")
  for name, value in whole_model.items():
    assert torch.equal(cut_model[name], value), name
  for name, value in whole_ema.items():
    assert torch.equal(cut_ema[name], value), name
  steps = [m["step"] for m in resumed.history]
  assert steps == [4, 8, 12]  # Nothing lost, nothing reported twice.
  for mine, theirs in zip(resumed.history, whole_history):
    assert mine["accuracy"] == theirs["accuracy"]
    assert mine["augtest_accuracy"] == theirs["augtest_accuracy"]


def test_a_simulation_reports_every_eval_with_a_checkpoint(tmp_path):
  reports = []
  trial.run_trial(_config(reference_batch_size=512),
                  report=lambda m, c: reports.append((m, c)),
                  checkpoint_dir=tmp_path)
  assert [m["step"] for m, _ in reports] == [4, 8, 12]
  assert all(c == tmp_path for _, c in reports)
  last = reports[-1][0]
  for key in ("train_loss", "clipped_fraction", "accuracy", "ema_accuracy",
              "augtest_accuracy", "examples_per_second", "epsilon"):
    assert key in last
  assert last["simulated"] is True and last["private"] is False
  assert not list(tmp_path.glob("*.partial"))


def test_a_private_run_reports_only_dp_outputs(tmp_path):
  reports = []
  result = trial.run_trial(_config(), checkpoint_dir=tmp_path,
                           report=lambda m, c: reports.append(m))
  assert len(reports) == 3
  for metrics in reports + result.history:
    assert set(metrics) <= set(run_state.PRIVATE_METRICS), sorted(metrics)
    assert metrics["private"] is True and metrics["simulated"] is False
    assert metrics["evaluated_on"] == "test"
  state = torch.load(tmp_path / trial.CHECKPOINT_FILE, weights_only=False)
  for metrics in state["history"]:
    assert set(metrics) <= set(run_state.PRIVATE_METRICS)
  # The checkpoint holds the secret generator states: owner-only.
  assert (tmp_path / trial.CHECKPOINT_FILE).stat().st_mode & 0o077 == 0


def test_a_private_run_draws_secret_sampling_and_noise(tmp_path):
  """Same config and public seed, yet two private runs differ; simulations
  of that config are reproducible, and the initialisation stays public."""
  first = trial.run_trial(_config(steps=4), checkpoint_dir=tmp_path / "a")
  second = trial.run_trial(_config(steps=4), checkpoint_dir=tmp_path / "b")
  assert first.metrics["private"] and second.metrics["private"]
  a, _, _ = _weights(tmp_path / "a")
  b, _, _ = _weights(tmp_path / "b")
  assert not torch.equal(a["fc.weight"], b["fc.weight"])
  simulated = _config(steps=4, reference_batch_size=512)
  trial.run_trial(simulated, checkpoint_dir=tmp_path / "c")
  trial.run_trial(simulated, checkpoint_dir=tmp_path / "d")
  c, _, _ = _weights(tmp_path / "c")
  d, _, _ = _weights(tmp_path / "d")
  assert torch.equal(c["fc.weight"], d["fc.weight"])
  zero_steps = dataclasses.replace(_config(), eval_every=1)
  inits = [run_state.RunState(zero_steps).model.state_dict() for _ in range(2)]
  for name, value in inits[0].items():
    assert torch.equal(inits[1][name], value), name


def test_a_private_run_resumes_exactly_from_its_secret_states(tmp_path):
  """Two resumptions of one checkpoint continue the same secret streams."""
  with pytest.raises(_Killed):
    trial.run_trial(_config(), checkpoint_dir=tmp_path / "cut",
                    on_step=_kill_after(5))
  shutil.copytree(tmp_path / "cut", tmp_path / "copy")
  trial.run_trial(_config(), checkpoint_dir=tmp_path / "cut")
  trial.run_trial(_config(), checkpoint_dir=tmp_path / "copy")
  for name, value in _weights(tmp_path / "cut")[0].items():
    assert torch.equal(_weights(tmp_path / "copy")[0][name], value), name


def test_generator_states_are_restored_on_the_cpu_whatever_the_device(
    tmp_path):
  """A run on a GPU resumed its sampling state as a CUDA tensor and failed.

  The meta device stands in for a GPU: loading must never map generator
  states to the run's device.
  """
  config = _config(reference_batch_size=512)
  trial.run_trial(dataclasses.replace(
      config, privacy=dataclasses.replace(config.privacy, steps=4)),
      checkpoint_dir=tmp_path)
  run = run_state.RunState(config)
  run.device = torch.device("meta")
  run.load(tmp_path / trial.CHECKPOINT_FILE)
  assert run.step == 4
  saved = torch.load(tmp_path / trial.CHECKPOINT_FILE, weights_only=False)
  assert torch.equal(run.sampling_generator.get_state(), saved["sampling_rng"])
  assert torch.equal(run.noise_generator.get_state(), saved["noise_rng"])


def test_a_private_run_refuses_delta_above_one_over_n():
  with pytest.raises(ConfigError) as error:
    trial.run_trial(_config(delta=1e-3))
  assert error.value.field == "privacy.delta"
  assert f"1/N = {1 / DIGITS_N:.4g}" in error.value.allowed
  # A simulation is not accounted: its delta is only the reference's.
  run_state.RunState(_config(delta=1e-3, reference_batch_size=512))


def test_a_simulation_can_evaluate_on_a_validation_split():
  config = dataclasses.replace(_config(reference_batch_size=512, steps=4),
                               validation_fraction=0.1)
  run = run_state.RunState(config)
  assert run.evaluated_on == "validation"
  assert len(run.held_out) == round(0.1 * DIGITS_N)
  assert run.num_train == DIGITS_N - len(run.held_out)
  metrics = trial.run_trial(config).metrics
  assert metrics["evaluated_on"] == "validation"
  # Its reference trains on all N = 1437 examples; the trial on N' = 1293.
  reference = triplet_lib.PrivacyTriplet(DIGITS_N, 512, 8.0, 4)
  assert metrics["reference_epsilon"] == pytest.approx(
      accounting.epsilon(reference).epsilon)
  own = triplet_lib.PrivacyTriplet(run.num_train, 64, 1.0, 4)
  assert metrics["epsilon"] == pytest.approx(accounting.epsilon(own).epsilon)
  with pytest.raises(ConfigError) as error:
    dataclasses.replace(_config(), validation_fraction=0.1)
  assert error.value.field == "validation_fraction"  # A private run: test.


def test_auto_clipping_is_fast_when_it_covers_the_model_and_says_which(
    caplog):
  """The method is part of every private report (and so of MLflow's tags)."""
  assert trial.run_trial(_config(steps=2)).metrics["clipping"] == "fast"
  timm_model = dataclasses.replace(
      _config(steps=1, batch_size=8), model=models.ModelConfig("convnext_atto"),
      dataset=datasets.DatasetConfig("synthetic", image_size=32,
                                     train_size=32, test_size=8))
  with caplog.at_level("INFO"):
    assert trial.run_trial(timm_model).metrics["clipping"] == "vmap"
  assert "does not cover stem.1.weight" in caplog.text


@pytest.mark.parametrize(
    "sampler", ["poisson", "truncated-poisson", "fixed",
                "fixed-with-replacement"])
def test_each_sampler_trains_and_names_its_accountant(sampler):
  config = _config(steps=4, sampling=sampler, noise_multiplier=3.0)
  metrics = trial.run_trial(config).metrics
  scheme = config.privacy.scheme
  spent = accounting.epsilon(
      triplet_lib.PrivacyTriplet(DIGITS_N, 64, 3.0, 4), scheme=scheme)
  assert metrics["epsilon"] == spent.epsilon
  assert (metrics["accountant"], metrics["adjacency"], metrics["sampling"]) == (
      spent.accountant, spent.adjacency, spent.sampling)
  assert metrics["step"] == 4


@pytest.mark.slow
def test_a_jl_run_trains_with_augmult_and_names_its_own_accountant():
  config = _config("jl", steps=4, noise_multiplier=3.0, jl_projections=32)
  result = trial.run_trial(config)
  metrics = result.metrics
  spent = accounting.epsilon(triplet_lib.PrivacyTriplet(DIGITS_N, 64, 3.0, 4),
                             scheme=SamplingScheme(bound=JlBound(32)))
  assert metrics["clipping"] == "jl"
  assert metrics["accountant"] == "pld-jl"
  assert metrics["epsilon"] == spent.epsilon
  assert "JL clipping with 32 projections" in metrics["sampling"]
  assert 0 < metrics["accuracy"] <= 1


def test_a_simulation_says_it_is_not_private():
  config = _config(noise_multiplier=0.5, reference_batch_size=512)
  metrics = trial.run_trial(config).metrics
  assert metrics["simulated"] is True and metrics["private"] is False
  # The reference run: B = 512, sigma = 0.5 * 8 = 4, the same 12 steps.
  reference = triplet_lib.PrivacyTriplet(DIGITS_N, 512, 4.0, 12)
  assert metrics["reference_epsilon"] == pytest.approx(
      accounting.epsilon(reference).epsilon)
  assert metrics["epsilon"] > metrics["reference_epsilon"]


def test_a_diverging_run_stops_with_a_clear_error():
  config = dataclasses.replace(
      _config(), optim=trial_config.OptimConfig(lr=1e12, ema_decay=None),
      privacy=trial_config.PrivacyConfig(256, 0.0, 50, private=False),
  )
  with pytest.raises(trial.TrialDiverged, match="diverged"):
    trial.run_trial(config)


def test_a_diverging_simulation_names_its_step_a_private_run_none(
    monkeypatch):
  """A private run stops at its next evaluation, whichever secret step
  broke it, and says no step."""
  steps = []
  train_step = run_state.RunState.train_step
  monkeypatch.setattr(run_state.RunState, "train_step",
                      lambda run: steps.append(train_step(run)))
  simulated = dataclasses.replace(
      _config(reference_batch_size=512),
      optim=trial_config.OptimConfig(lr=1e38, ema_decay=None))
  with pytest.raises(trial.TrialDiverged,
                     match=r"not finite after step \d+: the run diverged"):
    trial.run_trial(simulated)
  steps.clear()
  private = dataclasses.replace(simulated, privacy=dataclasses.replace(
      simulated.privacy, reference_batch_size=None))
  with pytest.raises(trial.TrialDiverged) as error:
    trial.run_trial(private)
  assert str(error.value).startswith(
      "the weights are not finite: the run diverged")
  assert len(steps) % 4 == 0  # At an evaluation (eval_every = 4).


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: _config(batch_size=5000), "privacy.batch_size"),
        (lambda: datasets.DatasetConfig("svhn"), "name"),
        (lambda: models.ModelConfig("resnet-9000"), "model.name"),
        (lambda: augment.AugmentConfig("cutmix"), "family"),
        (lambda: augment.AugmentConfig("crop-flip", multiplicity=0),
         "multiplicity"),
        (lambda: datasets.DatasetConfig("cifar10", root="/nonexistent"), "root"),
        (lambda: trial_config.PrivacyConfig(64, 0.0, 10), "noise_multiplier"),
        (lambda: trial_config.OptimConfig(lr=-1), "lr"),
        (lambda: dataclasses.replace(_config(), clipping="ghost"), "clipping"),
        (lambda: _config("jl"), "privacy.jl_projections"),
        (lambda: _config(jl_projections=8), "privacy.jl_projections"),
        (lambda: _config(jl_projections=0), "jl_projections"),
        (lambda: dataclasses.replace(
            _config(), clipping="fast", model=models.ModelConfig("convnext_atto"),
            dataset=datasets.DatasetConfig("synthetic", image_size=32)),
         "clipping"),
    ],
)
def test_bad_input_names_the_field(make, field):
  with pytest.raises(ConfigError) as error:
    config = make()
    if isinstance(config, (trial_config.TrialConfig, datasets.DatasetConfig)):
      trial.run_trial(config if isinstance(config, trial_config.TrialConfig)
                      else dataclasses.replace(_config(), dataset=config))
  assert field in error.value.field


def test_an_examples_copies_ignore_the_rest_of_its_batch():
  """Augmentation is keyed by (key, step, the example's content id):
  neighbouring batches share every other example's copies bit for bit."""
  run = run_state.RunState(_config(reference_batch_size=512))
  run.step = 3

  def copies(indices):
    batch = sampling.LogicalBatch(torch.tensor(indices))
    return run._micro_batch(batch)[0]

  mine, theirs = copies([3, 5, 9, 11]), copies([1, 5, 11, 20])
  assert torch.equal(mine[1], theirs[1]) and torch.equal(mine[3], theirs[2])
  run.step = 4
  assert not torch.equal(mine[1], copies([5])[0])  # Another step.


def _image_folder(root, names):
  """root/train/<class>/<name>.png: 8x8 noise, a picture per (class, name);
  one image per class in root/val."""
  for folder, files in (("train", names), ("val", {"a": ["v"], "b": ["v"]})):
    for label, stems in files.items():
      (root / folder / label).mkdir(parents=True, exist_ok=True)
      for stem in stems:
        seed = int.from_bytes(f"{label}/{stem}".encode(), "little") % 2**32
        pixels = np.random.default_rng(seed).integers(0, 256, (8, 8, 3))
        Image.fromarray(pixels.astype(np.uint8)).save(
            root / folder / label / f"{stem}.png")


def _copies_by_content(root, step=3, private=False):
  """Every training example's augmented copies at `step`, by its pixels."""
  privacy = dict(batch_size=4, noise_multiplier=1.0, steps=8)
  if not private:
    privacy["reference_batch_size"] = 16
  run = run_state.RunState(trial_config.TrialConfig(
      dataset=datasets.DatasetConfig("imagefolder", root=str(root),
                                     image_size=8),
      model=models.ModelConfig("small-cnn"),
      privacy=trial_config.PrivacyConfig(**privacy, delta=1e-2),
      augment=augment.AugmentConfig("crop-flip", multiplicity=3),
      device="cpu"))
  run.step = step
  rows = torch.arange(run.num_train)
  images, labels = run.train.get_batch(rows)
  copies = run._micro_batch(sampling.LogicalBatch(rows))[0]
  return {(image.numpy().tobytes(), int(label)): copy
          for image, label, copy in zip(images, labels, copies)}


def test_inserting_or_removing_examples_leaves_the_others_copies_equal(
    tmp_path):
  """Keyed by position, inserting an image at the front of a class (folders
  sort by file name) changed 5 of 5 other examples' copies, and removing one
  from the middle 3 of 4: each example's draws are keyed by its content."""
  _image_folder(tmp_path / "before", {"a": ["1", "2", "3", "4", "5"],
                                      "b": ["1", "2", "3"]})
  _image_folder(tmp_path / "after", {"a": ["0", "1", "2", "4", "5"],
                                     "b": ["1", "2", "3"]})
  before = _copies_by_content(tmp_path / "before")
  after = _copies_by_content(tmp_path / "after")
  shared = before.keys() & after.keys()
  assert len(shared) == 7 and len(before) == len(after) == 8
  for example in shared:
    assert torch.equal(before[example], after[example])
  assert not torch.equal(*(before[e] for e in list(shared)[:2]))
  later = _copies_by_content(tmp_path / "before", step=4)
  assert not any(torch.equal(before[e], later[e]) for e in shared)


def test_a_private_run_keys_augmentation_with_a_secret_seed(tmp_path):
  """The public seed's copies in a simulation; a private run's are drawn
  from its own secret key, so nobody knows which copies an example got."""
  _image_folder(tmp_path, {"a": ["1", "2"], "b": ["1", "2"]})
  public = _copies_by_content(tmp_path)
  assert all(torch.equal(public[e], copy)
             for e, copy in _copies_by_content(tmp_path).items())
  private = _copies_by_content(tmp_path, private=True)
  assert not any(torch.equal(public[e], copy) for e, copy in private.items())


def test_augtest_is_the_same_whatever_the_micro_batch():
  accuracies = []
  for size in (256, 50):
    run = run_state.RunState(dataclasses.replace(
        _config(reference_batch_size=512), max_physical_batch=size))
    accuracies.append(run._correct(run.model, augmented=True))
  assert accuracies[0] == accuracies[1]


def test_a_private_run_draws_a_secret_dropout_seed():
  """Dropout masks fall in batch order: only a secret seed keeps an added
  example from moving the others onto masks the adversary knows."""
  public = seeds_lib.run_seeds(0, secret=False)
  assert public == seeds_lib.run_seeds(0, secret=False)
  # The fourth public seed leaves the first three as they were.
  words = np.random.SeedSequence(0).generate_state(3)
  assert (public.init, public.sampling, public.noise) == tuple(words)
  first, second = (seeds_lib.run_seeds(0, secret=True) for _ in range(2))
  assert first.init == public.init
  assert len({first.dropout, second.dropout, public.dropout}) == 3
  assert str(first.dropout) not in repr(first)
  # Augmentation's key too: a fifth public word, secret in a private run.
  assert public.augment == int(np.random.SeedSequence(0).generate_state(5)[4])
  assert len({first.augment, second.augment, public.augment}) == 3
  assert str(first.augment) not in repr(first)


def test_a_resumed_run_with_dropout_ends_with_the_same_weights(
    tmp_path, monkeypatch):
  """Dropout's generator is checkpointed: without it a resumed run would
  replay the first steps' masks."""
  build = models.build_model
  monkeypatch.setattr(models, "build_model", lambda *args: nn.Sequential(
      nn.Dropout(0.5), build(*args)))
  config = _config(reference_batch_size=512, steps=8)
  trial.run_trial(config, checkpoint_dir=tmp_path / "whole")
  with pytest.raises(_Killed):
    trial.run_trial(config, checkpoint_dir=tmp_path / "cut",
                    on_step=_kill_after(6))
  trial.run_trial(config, checkpoint_dir=tmp_path / "cut")
  whole, cut = _weights(tmp_path / "whole")[0], _weights(tmp_path / "cut")[0]
  for name, value in whole.items():
    assert torch.equal(cut[name], value), name
