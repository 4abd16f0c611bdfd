"""tan_tune.training.model_families: one registry of model families, the
built-ins registered as any other, and `ModelConfig` checked against it."""

import pytest
from torch import nn

from tan_tune.errors import ConfigError
from tan_tune.training import model_families
from tan_tune.training import models


class _Probe(model_families.ModelFamily):
  """A family of one name that reads `scales`."""

  names = ("probe",)
  options = frozenset({"scales"})

  def build(self, config, input_shape, num_classes):
    return nn.Sequential(nn.Flatten(), nn.LazyLinear(num_classes))


@pytest.fixture
def probe(monkeypatch):
  monkeypatch.setattr(model_families, "_FAMILIES",
                      list(model_families._FAMILIES))  # pylint: disable=protected-access
  return model_families.register(_Probe())


def test_every_built_in_is_a_registered_family():
  kinds = [type(family).__name__ for family in model_families.families()]
  assert kinds == ["WideResNet", "SmallCnn", "DpCnn", "DpCnn", "ScatterNet",
                   "ScatterNet", "Factory", "Timm"]
  assert model_families.takers("width") == ["small-cnn", "dp-cnn",
                                            "dp-cnn-gn"]
  assert model_families.takers("scales") == ["scatternet", "scatternet-cnn"]


@pytest.mark.parametrize("config, family", [
    (models.ModelConfig("wrn-16-4"), "WideResNet"),
    (models.ModelConfig("dp-cnn-gn"), "DpCnn"),
    (models.ModelConfig("resnet18"), "Timm"),
    (models.ModelConfig(factory="plugin_factories:digits_mlp"), "Factory"),
])
def test_a_config_chooses_its_family(config, family):
  assert type(model_families.family_of(config)).__name__ == family


def test_the_network_a_family_names_is_asked_for_what_it_reads():
  assert model_families.takes("wrn-28-10", "width") is False
  assert model_families.takes("dp-cnn", "width") is True
  assert model_families.takes(None, "width") is False
  scatternets = [models.ModelConfig(n) for n in ("scatternet",
                                                  "scatternet-cnn")]
  assert {model_families.family_of(c).front_end(c) for c in scatternets} == {
      "scatternet"}


def test_a_family_of_ones_own_joins_the_lists_before_the_fallback(probe):
  assert model_families.families()[-1].fallback
  assert model_families.allowed().endswith(
      "'scatternet-cnn', 'probe', or any timm model name (e.g. 'resnet18',"
      " 'nf_resnet50', 'vit_tiny_patch16_224')")
  assert model_families.allowed_briefly().endswith(
      "'probe' or a timm model name")
  assert model_families.family_of(models.ModelConfig("probe")) is probe
  assert models.ModelConfig("probe", scales=3).scales == 3
  with pytest.raises(ConfigError, match="model.width"):
    models.ModelConfig("probe", width=2)


def test_only_a_model_family_registers():
  with pytest.raises(TypeError, match="not a ModelFamily"):
    model_families.register(object())
