"""Tests of a team's own data, named by a dataset factory: what it may return,
what is refused and why, and a private run on records that are not images."""

import pytest
import torch

from tan_tune import config_io
from tan_tune.errors import ConfigError
from tan_tune.training import datasets
from tan_tune.training import trial
from tan_tune.training import trial_config
from tan_tune.training import user_data


def _data(name, **kwargs):
  return datasets.DatasetConfig(None, factory=f"plugin_factories:{name}",
                                kwargs=kwargs)


def test_pairs_of_tensors_load_as_a_dataset_of_records():
  data = datasets.load_dataset(_data("tabular_tensors", features=5))
  assert (data.num_train, len(data.test)) == (240, 60)
  assert data.input_shape == (5,) and not data.is_image
  assert data.num_classes == 3 and (data.mean, data.std) == ((0.0,), (1.0,))
  inputs, labels = data.train.get_batch(torch.tensor([0, 4, 2]))
  assert inputs.shape == (3, 5) and inputs.dtype == torch.float32
  assert labels.tolist() == [0, 1, 2]


def test_a_map_style_dataset_reads_item_by_item_and_names_the_same_data():
  table = datasets.load_dataset(_data("tabular_table"))
  tensors = datasets.load_dataset(_data("tabular_tensors"))
  assert table.mean == (0.0,) * 6
  indices = torch.tensor([3, 1])
  assert torch.equal(table.train.get_batch(indices)[0],
                     tensors.train.get_batch(indices)[0])
  # The ledger's name for the data is the set of its examples, whatever
  # container holds them.
  assert datasets.examples(table) == datasets.examples(tensors)


def test_images_from_a_factory_are_images():
  data = datasets.load_dataset(datasets.DatasetConfig(
      None, factory="tan_tune.training.user_data:random_examples",
      kwargs={"input_shape": [1, 8, 6], "num_classes": 4, "train_size": 10,
              "test_size": 5}))
  assert data.is_image and data.input_shape == (1, 8, 6)
  datasets.check_augmentation(data, "crop-flip")


def test_records_refuse_augmentation():
  data = datasets.load_dataset(_data("tabular_tensors"))
  datasets.check_augmentation(data, "none")
  with pytest.raises(ConfigError) as error:
    datasets.check_augmentation(data, "crop-flip")
  assert error.value.field == "augment.family"
  assert "'none' for inputs of shape [6]" in error.value.allowed


@pytest.mark.parametrize("changes, allowed", [
    ({"num_classes": None}, "a dict with train, test and num_classes"),
    ({"labels": [1]}, "a dict with train, test and num_classes"),
    ({"num_classes": 1}, "num_classes an integer >= 2"),
    ({"num_classes": True}, "num_classes an integer >= 2"),
    ({"train": 3}, "'train' split has a map-style torch Dataset"),
    ({"train": (torch.zeros(4, 2), torch.zeros(3))}, "as many labels"),
    ({"test": (torch.zeros(0, 6), torch.zeros(0))}, "at least one example"),
    ({"test": (torch.zeros(2, 5), torch.zeros(2))},
     "inputs of the training split's shape [6]"),
    ({"train": (torch.zeros(4), torch.zeros(4))}, "at least one axis"),
    ({"mean": [0.0, 1.0]}, "mean one number or 6"),
    ({"std": "wide"}, "std one number or 6"),
    ({"std": 0.0}, "std > 0"),
])
def test_a_factory_the_run_cannot_use_is_refused_with_the_reason(
    changes, allowed):
  with pytest.raises(ConfigError) as error:
    datasets.load_dataset(_data("data_with", **changes))
  assert error.value.field == "dataset.factory"
  assert allowed in error.value.allowed


def test_a_factory_that_is_not_a_dict_is_refused():
  with pytest.raises(ConfigError) as error:
    datasets.load_dataset(_data("tabular_mlp"))
  assert "got a Sequential" in error.value.allowed


def test_examples_without_bytes_to_fingerprint_are_refused():
  with pytest.raises(ConfigError) as error:
    datasets.load_dataset(_data("unhashable"))
  assert error.value.field == "dataset.factory"
  assert "so the ledger can fingerprint them" in error.value.allowed


def test_a_label_out_of_range_is_refused_without_saying_which_example():
  data = datasets.load_dataset(_data("one_label_out_of_range"))
  with pytest.raises(ConfigError) as error:
    datasets.examples(data)
  assert "labels in [0, num_classes = 3); one is outside" in (
      error.value.allowed)
  assert "7" not in error.value.allowed


@pytest.mark.parametrize("flaw, allowed", [
    ("nan", "'train' split has finite inputs; one holds a NaN or an"),
    ("inf", "'train' split has finite inputs; one holds a NaN or an"),
    ("half_labels", "'train' split has integer labels, or floats that are"
     " whole numbers (none is cut to one); one is not"),
    ("one_class", "'train' split has examples of at least 2 classes"),
    ("empty_test", "'test' split has at least one example"),
])
@pytest.mark.parametrize("table", [False, True])
def test_data_a_run_would_fail_on_is_refused_before_its_ledger_identity(
    flaw, allowed, table):
  """Checked as it is read, in the pass every charge makes first:
  `datasets.examples`. 0.5 and 1.5 were cut to 0 and 1 in silence."""
  whole = datasets.load_dataset(_data("flawed_records", flaw="none",
                                      table=table))
  assert len(datasets.examples(whole)) == 300
  with pytest.raises(ConfigError) as error:
    datasets.examples(datasets.load_dataset(
        _data("flawed_records", flaw=flaw, table=table)))
  assert error.value.field == "dataset.factory"
  assert allowed in error.value.allowed
  assert "0.5" not in error.value.allowed  # Never a private value.


@pytest.mark.parametrize("fields, field", [
    ({"name": "digits", "factory": "plugin_factories:tabular_tensors"},
     "dataset"),
    ({"name": None}, "dataset"),
    ({"name": "digits", "kwargs": {"features": 3}}, "dataset.kwargs"),
    ({"name": None, "factory": "plugin_factories"}, "dataset.factory"),
])
def test_a_dataset_config_names_exactly_one_source(fields, field):
  with pytest.raises(ConfigError) as error:
    datasets.DatasetConfig(**fields)
  assert error.value.field == field


def test_a_private_run_trains_a_teams_mlp_on_its_records():
  config = config_io.from_dict(trial_config.TrialConfig, {
      "dataset": {"factory": "plugin_factories:tabular_table"},
      "model": {"factory": "plugin_factories:tabular_mlp"},
      "privacy": {"batch_size": 60, "noise_multiplier": 1.0, "steps": 30,
                  "delta": 1e-3},
      "optim": {"lr": 0.5, "momentum": 0.9},
      "eval_every": 30, "device": "cpu"})
  assert config.dataset.title == "plugin_factories:tabular_table"
  result = trial.run_trial(config)
  # Three well-separated classes: far above chance (1/3) at sigma = 1.
  assert result.metrics["accuracy"] > 0.8
  assert result.metrics["epsilon"] < 10


def test_the_synthetic_twins_data_is_random_and_balanced():
  parts = user_data.random_examples([3], num_classes=2, train_size=4,
                                    test_size=2)
  inputs, labels = parts["train"]
  assert inputs.shape == (4, 3) and labels.tolist() == [0, 1, 0, 1]
  assert 0 <= float(inputs.min()) and float(inputs.max()) < 1

