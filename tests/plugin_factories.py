"""A team's own models, as its package would hold them: the factories that
test_plugins.py names in configs by reference ('plugin_factories:...')."""

import torch
from torch import nn

NOT_CALLABLE = 3


def digits_mlp(hidden: int = 32, num_classes: int = 10) -> nn.Module:
  """An MLP for 1x8x8 digits."""
  return nn.Sequential(nn.Flatten(), nn.Linear(64, hidden), nn.Tanh(),
                       nn.Linear(hidden, num_classes))


def with_batch_norm() -> nn.Module:
  return nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.Flatten(),
                       nn.Linear(4 * 6 * 6, 10))


def with_running_stats() -> nn.Module:
  """A norm whose running statistics Opacus' ModuleValidator refuses."""
  return nn.Sequential(nn.Conv2d(1, 4, 3),
                       nn.InstanceNorm2d(4, affine=True,
                                         track_running_stats=True),
                       nn.Flatten(), nn.Linear(4 * 6 * 6, 10))


def broken(depth: int = 1) -> nn.Module:
  raise ValueError(f"no layer for depth {depth}")


def not_a_model() -> str:
  return "an MLP"


class _Scale(nn.Module):
  """A learnt per-feature scale: a parameter fast clipping has no rule for."""

  def __init__(self, features: int):
    super().__init__()
    self.weight = nn.Parameter(torch.ones(features))

  def forward(self, x):
    return x * self.weight


def scaled_mlp() -> nn.Module:
  return nn.Sequential(nn.Flatten(), _Scale(64), nn.Linear(64, 10))


def tabular_mlp(features: int = 6, num_classes: int = 3) -> nn.Module:
  """An MLP for records of `features` numbers."""
  return nn.Sequential(nn.Linear(features, 16), nn.Tanh(),
                       nn.Linear(16, num_classes))


def _records(size: int, features: int, num_classes: int,
             seed: int) -> tuple[torch.Tensor, torch.Tensor]:
  """Records around one centre per class, as a team's table would hold."""
  generator = torch.Generator().manual_seed(seed)
  centres = torch.randn((num_classes, features),
                        generator=torch.Generator().manual_seed(99))
  labels = torch.arange(size) % num_classes
  noise = 0.3 * torch.randn((size, features), generator=generator)
  return centres[labels] + noise, labels


def tabular_tensors(features: int = 6, num_classes: int = 3,
                    train_size: int = 240, test_size: int = 60) -> dict:
  """A dataset factory returning pairs of tensors."""
  return {"train": _records(train_size, features, num_classes, seed=0),
          "test": _records(test_size, features, num_classes, seed=1),
          "num_classes": num_classes, "mean": 0.0, "std": 1.0}


class RecordTable(torch.utils.data.Dataset):
  """A map-style dataset of (record as a list, label) pairs."""

  def __init__(self, inputs: torch.Tensor, labels: torch.Tensor):
    self.inputs, self.labels = inputs.tolist(), labels.tolist()

  def __len__(self) -> int:
    return len(self.labels)

  def __getitem__(self, i: int):
    return self.inputs[i], self.labels[i]


def tabular_table(features: int = 6, num_classes: int = 3) -> dict:
  """A dataset factory returning map-style datasets, with per-feature
  normalisation constants."""
  return {"train": RecordTable(*_records(240, features, num_classes, 0)),
          "test": RecordTable(*_records(60, features, num_classes, 1)),
          "num_classes": num_classes, "mean": [0.0] * features,
          "std": [1.0] * features}


def data_with(**changes) -> dict:
  """`tabular_tensors`' dict with keys replaced (None removes one): the
  malformed factories the validation refuses."""
  parts = {**tabular_tensors(), **changes}
  return {key: value for key, value in parts.items() if value is not None}


class _Unhashable(torch.utils.data.Dataset):
  """Items whose inputs are strings: no bytes to fingerprint."""

  def __len__(self) -> int:
    return 4

  def __getitem__(self, i: int):
    return "a record", 0


def unhashable() -> dict:
  return {"train": _Unhashable(), "test": _Unhashable(), "num_classes": 2}


def flawed_records(flaw: str, table: bool = False) -> dict:
  """`tabular_tensors` with float labels and one flaw a run must refuse
  before its charge, as pairs of tensors or (`table`) map-style datasets:
  'nan' or 'inf' in one input, 'half_labels' (0.5 and 1.5 among whole
  labels), 'out_of_range' (one label = num_classes), 'one_class' (every
  training label 0) or 'empty_test'; 'none' has no flaw."""
  inputs, labels = _records(240, 6, 3, seed=0)
  labels = labels.to(torch.float32)
  test = _records(60, 6, 3, seed=1)
  if flaw in ("nan", "inf"):
    inputs[7, 2] = float(flaw)
  elif flaw == "half_labels":
    labels[7], labels[8] = 0.5, 1.5
  elif flaw == "out_of_range":
    labels[7] = 3
  elif flaw == "one_class":
    labels[:] = 0
  elif flaw == "empty_test":
    test = (torch.zeros(0, 6), torch.zeros(0))
  split = RecordTable if table else (lambda *pair: pair)
  return {"train": split(inputs, labels), "test": split(*test),
          "num_classes": 3}


def one_label_out_of_range() -> dict:
  inputs, labels = _records(30, 6, 3, seed=0)
  labels[7] = 3
  return {"train": (inputs, labels), "test": _records(9, 6, 3, seed=1),
          "num_classes": 3}


class _ChunkedMlp(nn.Module):
  """An MLP that splits large batches itself: a rule on the batch size,
  which torch.export cannot keep symbolic (the served model then carries
  this file)."""

  def __init__(self):
    super().__init__()
    self.fc = nn.Linear(64, 10)

  def forward(self, x):
    if x.shape[0] > 4:
      return torch.cat([self.forward(chunk) for chunk in x.split(4)])
    return self.fc(x.flatten(1))


def chunked_mlp() -> nn.Module:
  return _ChunkedMlp()
