"""A model family of one's own, registered as the built-ins are, trains a
private run through the API: 'tiny-mlp', one hidden layer of a width the
config's `width` multiplies. Its name is the run's model in the result,
whose checkpoint holds the family's weights beside its privacy card."""

import math

import pytest
from torch import nn

from tan_tune import api
from tan_tune.errors import ConfigError
from tan_tune.registry import privacy_card
from tan_tune.training import model_families
from tan_tune.training import models

import mlflow_stores


class TinyMlp(model_families.ModelFamily):
  """Flattened pixels, a hidden layer of 16 * width units, the logits."""

  names = ("tiny-mlp",)
  options = frozenset({"width"})

  def build(self, config, input_shape, num_classes):
    hidden = max(1, round(16 * config.width))
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape),
                                                 hidden),
                         nn.Tanh(), nn.Linear(hidden, num_classes))


@pytest.fixture
def tiny_mlp(monkeypatch):
  """The family, registered for this test only."""
  monkeypatch.setattr(model_families, "_FAMILIES",
                      list(model_families._FAMILIES))  # pylint: disable=protected-access
  return model_families.register(TinyMlp())


def test_a_registered_family_is_checked_built_and_trained(tmp_path,
                                                           tiny_mlp):
  assert "'tiny-mlp'" in model_families.allowed()
  assert "tiny-mlp" in model_families.takers("width")
  with pytest.raises(ConfigError, match="model.scales"):
    models.ModelConfig(tiny_mlp.names[0], scales=3)
  network = models.build_model(models.ModelConfig("tiny-mlp", width=0.5),
                               (1, 8, 8), 10)
  assert [layer.out_features for layer in network
          if isinstance(layer, nn.Linear)] == [8, 10]

  config = {
      "dataset": {"name": "digits"},
      "model": {"name": "tiny-mlp", "width": 2},
      "privacy": {"batch_size": 64, "noise_multiplier": 2.0, "steps": 4},
      "augment": {"family": "none"},
      "eval_every": 2, "device": "cpu",
  }
  trained = api.train(config, checkpoint_dir=tmp_path / "ck",
                      tracking_uri=mlflow_stores.store(tmp_path),
                      new_ledger=True, target_epsilon=50, progress=False)
  assert trained.config.model.name == "tiny-mlp"
  assert trained.metrics["private"] and trained.metrics["step"] == 4
  assert (tmp_path / "ck" / privacy_card.JSON_FILE).exists()
  released = api.load_checkpoint(tmp_path / "ck" / "checkpoint.pt")
  assert released["model"]["3.weight"].shape == (10, 32)  # Width 2.
