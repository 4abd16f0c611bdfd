"""tan_tune.training.private_score: the keyed validation split and the DP
score of a private search's trial."""

import dataclasses
import hashlib
import math

import pytest
import torch

from tan_tune.errors import ConfigError
from tan_tune.training import datasets
from tan_tune.training import models
from tan_tune.training import private_score
from tan_tune.training import run_state
from tan_tune.training import splits
from tan_tune.training import trial_config

KEY = b"k" * 32


def _private_digits(**privacy):
  """A private digits run of 2 steps, evaluated at each."""
  return trial_config.TrialConfig(
      dataset=datasets.DatasetConfig("digits"),
      model=models.ModelConfig("small-cnn"),
      privacy=trial_config.PrivacyConfig(64, 1.0, 2, **privacy),
      optim=trial_config.OptimConfig(lr=1.0, ema_decay=0.9),
      eval_every=1, device="cpu")


def _digests(n, salt=b""):
  return [hashlib.blake2b(salt + i.to_bytes(4, "big"),
                          digest_size=splits.DIGEST_BYTES).digest()
          for i in range(n)]


def test_an_examples_part_depends_on_its_content_alone():
  digests = _digests(2000)
  flags = private_score.held_out(digests, 0.25, KEY)
  # Remove example 7 and add a new one in front: no other example moves.
  changed = [_digests(1, b"new")[0]] + digests[:7] + digests[8:]
  moved = private_score.held_out(changed, 0.25, KEY)
  assert moved[1:].tolist() == flags[:7].tolist() + flags[8:].tolist()


def test_the_split_is_keyed():
  digests = _digests(2000)
  one = private_score.held_out(digests, 0.25, KEY)
  other = private_score.held_out(digests, 0.25, b"o" * 32)
  assert one.tolist() != other.tolist()


def test_about_f_of_the_examples_are_held_out():
  n, f = 20_000, 0.1
  held = int(private_score.held_out(_digests(n), f, KEY).sum())
  # |V| ~ Binomial(N, f): five standard deviations.
  assert abs(held - n * f) < 5 * math.sqrt(n * f * (1 - f))


def test_the_parts_partition_the_training_set():
  train = splits.TensorSplit(torch.zeros(500, 1, 2, 2, dtype=torch.uint8),
                             torch.arange(500) % 10, 255)
  part, validation = private_score.split(train, _digests(500), 0.3, KEY)
  assert len(part) + len(validation) == 500
  assert not set(part.indices.tolist()) & set(validation.indices.tolist())


def test_the_noisy_score_is_the_count_plus_gaussian_noise_over_f_n():
  score = private_score.PrivateScore(0.1, 4.0, "ema_accuracy")
  generator = torch.Generator().manual_seed(0)
  draws = torch.tensor([score.noisy(300, 3000, generator)
                        for _ in range(4000)], dtype=torch.float64)
  # (300 + Z) / 300, Z ~ N(0, 16): mean 1, standard deviation 4 / 300;
  # five standard errors of each.
  assert abs(draws.mean().item() - 1) < 5 * (4 / 300) / math.sqrt(4000)
  assert abs(draws.std().item() - 4 / 300) < 5 * (4 / 300) / math.sqrt(
      2 * 3999)


@pytest.mark.parametrize("fields, field", [
    ((0.0, 1.0, "accuracy"), "validation_fraction"),
    ((0.2, 0.0, "accuracy"), "score_noise"),
    ((0.2, 1.0, "loss"), "metric"),
])
def test_bad_scores_name_their_field(fields, field):
  with pytest.raises(ConfigError, match=field):
    private_score.PrivateScore(*fields)


def test_a_noise_that_drowns_the_ranking_is_refused_with_its_number():
  # s = 1000 on N = 60,000: 3.3 points of accuracy even on half of it.
  with pytest.raises(ConfigError, match=r"score_noise.*3\.3 points"):
    private_score.check_useful(0.1, 1000.0, 60_000)
  # s = 100 on 600 examples: 17 points; a tenth of the data would do.
  with pytest.raises(ConfigError,
                     match=r"validation_fraction.*17 points.*>= 0\.0833"):
    private_score.check_useful(0.01, 100.0, 60_000)
  private_score.check_useful(0.1, 100.0, 60_000)  # 1.7 points: allowed.


def test_a_scored_run_trains_on_its_part_at_the_whole_sets_rate():
  config = dataclasses.replace(
      _private_digits(),
      score=private_score.PrivateScore(0.2, 2.0, "ema_accuracy"))
  run = run_state.RunState(config, split_key=KEY)
  n = run.data.num_train
  assert run.evaluated_on == private_score.EVALUATED_ON
  assert len(run.train) + len(run.held_out) == n
  assert run.num_train == n and run.sampler.rows == len(run.train)
  run.train_step()
  first = run.evaluate()
  assert first["score"] is None and "ema_accuracy" not in first
  run.train_step()
  last = run.evaluate()
  assert isinstance(last["score"], float) and "accuracy" not in last


def test_a_score_needs_a_private_poisson_run():
  with pytest.raises(ConfigError, match="score"):
    dataclasses.replace(
        _private_digits(sampling="fixed"),
        score=private_score.PrivateScore(0.2, 2.0, "ema_accuracy"))
