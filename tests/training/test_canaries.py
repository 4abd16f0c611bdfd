"""Tests of an audited run's canaries (`training/canaries.py`)."""

import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

from tan_tune.errors import ConfigError
from tan_tune.privacy import accounting
from tan_tune.privacy import audit
from tan_tune.privacy import triplet
from tan_tune.training import canaries
from tan_tune.training import datasets
from tan_tune.training import models
from tan_tune.training import run_state
from tan_tune.training import splits
from tan_tune.training import trial
from tan_tune.training import trial_config


@pytest.mark.parametrize("fields, field", [
    ({"count": 0}, "canaries.count"),
    ({"kinds": ("input", "input")}, "canaries.kinds"),
    ({"kinds": ("weights",)}, "canaries.kinds"),
    ({"kinds": ()}, "canaries.kinds"),
    ({"base": "train"}, "canaries.base"),
])
def test_a_bad_canary_config_names_its_field(fields, field):
  with pytest.raises(ConfigError, match=field):
    canaries.CanaryConfig(**{"count": 10, "mask_seed": 1, **fields})


def test_inclusion_is_a_fair_coin_per_canary_and_kind_from_the_secret_seed():
  config = canaries.CanaryConfig(count=4000, mask_seed=7)
  included = config.included()
  assert set(included) == {"input", "gradient"}
  for kept in included.values():
    assert abs(kept.mean() - 0.5) < 0.03
  # Two kinds, two independent draws; the same seed, the same draw.
  assert 0.45 < (included["input"] == included["gradient"]).mean() < 0.55
  assert np.array_equal(included["input"], config.included()["input"])
  other = canaries.CanaryConfig(count=4000, mask_seed=8).included()
  assert not np.array_equal(included["input"], other["input"])


def test_the_secret_seed_is_not_in_the_repr():
  assert "123456789" not in repr(canaries.CanaryConfig(10, 123456789))


def test_one_kind_draws_what_it_draws_beside_the_other():
  both = canaries.CanaryConfig(count=50, mask_seed=3).included()
  alone = canaries.CanaryConfig(count=50, mask_seed=3,
                                kinds=("gradient",)).included()
  assert set(alone) == {"gradient"}
  assert np.array_equal(alone["gradient"], both["gradient"])


def _base(size=6):
  images = torch.arange(size, dtype=torch.uint8).view(size, 1, 1, 1).expand(
      size, 1, 2, 2).contiguous()
  return splits.TensorSplit(images, torch.arange(size) % 3, max_value=10)


def test_the_split_holds_base_rows_then_input_canaries_then_gradient_rows():
  split = canaries.CanarySplit(
      _base(), torch.full((2, 1, 2, 2), 0.5), torch.tensor([2, 1]),
      torch.tensor([4, 9, 11]))
  assert len(split) == 6 + 2 + 3 and split.first_gradient_row == 8
  images, labels = split.get_batch(torch.tensor([1, 6, 5, 7]))
  assert images[:, 0, 0, 0].tolist() == pytest.approx([0.1, 0.5, 0.5, 0.5])
  assert labels.tolist() == [1, 2, 2, 1]
  with pytest.raises(ValueError, match="no image"):
    split.get_batch(torch.tensor([8]))
  # Rows are named by content: the first input canary (0.5, label 2) is
  # base row 5's twin, and draws as it does.
  digests = split.example_digests()
  assert len(digests) == len(split) and digests[6] == digests[5]
  assert len(set(digests)) == len(split) - 1
  again = canaries.CanarySplit(
      _base(), torch.full((2, 1, 2, 2), 0.5), torch.tensor([2, 1]),
      torch.tensor([4, 9, 11]))
  assert again.example_digests() == digests


def _canaries(count=5, kinds=canaries.KINDS, seed=0):
  model = nn.Sequential(nn.Flatten(), nn.Linear(4, 16), nn.Linear(16, 3))
  config = canaries.CanaryConfig(count=count, mask_seed=11, kinds=kinds)
  return canaries.Canaries(config, seed, _base(), (1, 2, 2), 3, model), model


def test_only_the_included_canaries_join_the_training_set():
  made, _ = _canaries(count=40)
  included = made.config.included()
  split = made.split
  assert len(split) == 6 + int(included["input"].sum()) + int(
      included["gradient"].sum())
  assert torch.equal(split.gradient_ids,
                     torch.from_numpy(np.flatnonzero(included["gradient"])))
  kept_images = made.images[torch.from_numpy(included["input"])]
  assert torch.equal(split.images, kept_images)


def test_the_universe_counts_every_canary_included_or_not():
  made, model = _canaries(count=40)
  again = canaries.Canaries(
      canaries.CanaryConfig(count=40, mask_seed=12), 0, _base(), (1, 2, 2), 3,
      model)
  assert len(made.split) != len(again.split)
  assert made.universe_size == again.universe_size == 6 + 2 * 40
  assert canaries.CanaryConfig(count=40, mask_seed=11, kinds=("gradient",)
                               ).universe_size(6) == 6 + 40


def test_gradient_rows_leave_the_batch_as_weighted_counts_per_canary():
  made, model = _canaries(count=40)
  first = made.split.first_gradient_row
  ids = made.split.gradient_ids
  indices = torch.tensor([0, 3, first, first + 2, first + 2])
  weights = torch.tensor([1.0, 0.0, 1.0, 1.0, 1.0])
  rows, kept_weights, counts = made.split_rows(indices, weights)
  assert rows.tolist() == [0, 3] and kept_weights.tolist() == [1.0, 0.0]
  expected = torch.zeros(40)
  expected[ids[0]], expected[ids[2]] = 1.0, 2.0
  assert torch.equal(counts, expected)
  summed = made.gradient_sum(model, counts, clip_norm=0.5)
  flat = torch.cat([summed.get(name, torch.zeros_like(p)).flatten()
                    for name, p in model.named_parameters()])
  assert flat.norm() == pytest.approx(0.5 * np.sqrt(1 + 4))
  assert flat[made.coordinates[ids[2]]] == 1.0
  assert flat[made.coordinates[ids[0]]] == 0.5
  # Only the parameters that hold a drawn canary's weight get a tensor.
  holders = {name for name, g in summed.items() if bool(g.any())}
  assert set(summed) == holders and 1 <= len(summed) <= 2
  assert made.gradient_sum(model, torch.zeros(40), clip_norm=0.5) == {}


def test_coordinates_are_distinct_public_and_bounded_by_the_model():
  model = nn.Linear(4, 3)
  first = canaries.gradient_coordinates(15, 5, model)
  assert len(set(first.tolist())) == 15 and first.max() < 15
  assert np.array_equal(first, canaries.gradient_coordinates(15, 5, model))
  with pytest.raises(ConfigError, match="at most the model's 15 parameters"):
    canaries.gradient_coordinates(16, 5, model)


def test_scores_are_minus_the_loss_and_minus_each_coordinates_move():
  made, model = _canaries(count=4)
  with torch.no_grad():
    moved = torch.zeros(sum(p.numel() for p in model.parameters()))
    moved[made.coordinates] = torch.tensor([-1.0, 0.0, 2.0, 0.5])
    flat = torch.cat([p.flatten() for p in model.parameters()])
    start = 0
    for p in model.parameters():
      p.add_(moved[start:start + p.numel()].view_as(p))
      start += p.numel()
  scores = made.scores(model, lambda x: x)
  assert scores["gradient"] == pytest.approx(
      -(flat[made.coordinates] - made.initial).numpy() + np.array(
          [1.0, 0.0, -2.0, -0.5]))
  logits = model(made.images)
  expected = -nn.functional.cross_entropy(logits, made.labels,
                                          reduction="none")
  assert scores["input"] == pytest.approx(expected.detach().numpy())


def _audited(noise_multiplier, count=300, base="public", steps=20):
  config = canaries.CanaryConfig(count=count, mask_seed=2024, base=base)
  return trial_config.TrialConfig(
      dataset=datasets.DatasetConfig("digits"),
      model=models.ModelConfig("small-cnn"),
      privacy=trial_config.PrivacyConfig(
          batch_size=200, noise_multiplier=noise_multiplier, steps=steps,
          delta=1e-5),
      optim=trial_config.OptimConfig(lr=2.0, momentum=0.5),
      eval_every=steps, device="cpu", canaries=config)


def test_a_weak_run_gives_its_canaries_away_through_the_real_trainer():
  # sigma = 0.2 for 40 steps: 57 to 60 of 60 guesses right in 8 runs of
  # each kind (at 20 steps the input canaries' mean was 53, and a run fell to
  # 49: too near the threshold for a test of secret noise).
  config = _audited(noise_multiplier=0.2, steps=40)
  result = trial.run_trial(config)
  assert result.metrics["evaluated_on"] == (
      "test, trained on too (an audit on public data)")
  for kind, kept in config.canaries.included().items():
    found = audit.bound(result.canary_scores[kind], kept, 60, 1e-5)
    assert found.correct >= 50, (kind, found)
    assert found.epsilon_lower_bound > 1.0


def test_a_strong_run_keeps_them():
  # sigma = 20, eps = 0.25: about 30 of 60 right, as by chance. At 99.9%
  # confidence, eps_lb passes eps with 44 right, 3.6 sd above chance.
  config = _audited(noise_multiplier=20.0)
  result = trial.run_trial(config)
  for kind, kept in config.canaries.included().items():
    found = audit.bound(result.canary_scores[kind], kept, 60, 1e-5,
                        confidence=0.999)
    assert found.epsilon_lower_bound <= result.metrics["epsilon"], (kind,
                                                                    found)


def test_the_run_trains_on_the_base_and_the_included_canaries():
  config = _audited(noise_multiplier=1.0, base="private")
  included = config.canaries.included()
  result = trial.run_trial(config)
  # Its eps is the universe's: N_u = 1437 + 2 m, whatever the draw.
  size = 1437 + 2 * 300
  assert sum(int(v.sum()) for v in included.values()) != 300
  assert result.metrics["evaluated_on"] == "test"
  assert result.metrics["private"] is True
  assert result.metrics["epsilon"] == pytest.approx(accounting.epsilon(
      triplet.PrivacyTriplet(size, 200, 1.0, 20), 1e-5).epsilon)


def _with_mask(config, mask_seed):
  return dataclasses.replace(config, canaries=dataclasses.replace(
      config.canaries, mask_seed=mask_seed))


@pytest.mark.slow
@pytest.mark.parametrize("sampling", ["poisson", "truncated-poisson"])
def test_the_audit_run_samples_its_universe_whatever_canaries_are_in(
    sampling):
  config = _audited(noise_multiplier=1.0, base="private")
  config = dataclasses.replace(config, privacy=dataclasses.replace(
      config.privacy, sampling=sampling))
  states = [run_state.RunState(_with_mask(config, seed)) for seed in (1, 2)]
  assert len(states[0].train) != len(states[1].train)  # N_a: secret.
  universe = 1437 + 2 * 300
  metrics = []
  for state in states:
    assert state.num_train == universe
    sampler = state.sampler
    assert sampler.sampling_rate == 200 / universe
    assert sampler.rows == len(state.train)
    drawn = torch.cat([sampler.sample().indices for _ in range(20)])
    assert int(drawn.max()) < len(state.train)  # An absent canary: never.
    state.step = 20
    metrics.append(state.evaluate())
  assert metrics[0]["epsilon"] == metrics[1]["epsilon"] == accounting.epsilon(
      triplet.PrivacyTriplet(universe, 200, 1.0, 20), 1e-5,
      scheme=config.privacy.scheme).epsilon


def test_a_private_audit_refuses_a_fixed_size_sampler():
  config = _audited(noise_multiplier=1.0, base="private")
  for sampling in ("fixed", "fixed-with-replacement"):
    with pytest.raises(ConfigError, match="canaries.base: 'private' is not"
                       " allowed; 'public' with fixed"):
      dataclasses.replace(config, privacy=dataclasses.replace(
          config.privacy, sampling=sampling))
  # On public data it samples the rows present: N_a, as before.
  public = _audited(noise_multiplier=1.0)
  public = dataclasses.replace(public, privacy=dataclasses.replace(
      public.privacy, sampling="fixed", adjacency="replace-one"))
  state = run_state.RunState(public)
  assert state.num_train == state.sampler.rows == len(state.train)


def test_only_a_private_run_takes_canaries():
  config = _audited(noise_multiplier=1.0)
  with pytest.raises(ConfigError, match="canaries"):
    trial_config.TrialConfig(
        dataset=config.dataset, model=config.model,
        privacy=trial_config.PrivacyConfig(
            batch_size=64, noise_multiplier=1.0, steps=20,
            reference_batch_size=512),
        canaries=config.canaries)
