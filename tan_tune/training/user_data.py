"""Your own data, from a factory named in the config (`dataset.factory`).

The factory is called with `dataset.kwargs` wherever the run trains and
returns a mapping:

  train, test: the splits, each a map-style `torch.utils.data.Dataset` whose
    item i is an (input, label) pair, or a pair of tensors (inputs [N, ...],
    labels [N]). Inputs are tensors or arrays of one shape; inputs of shape
    (C, H, W) are images, in [0, 1] where augmentation applies; every value
    is finite. Labels are integers in [0, num_classes) (a float label must
    be a whole number: 0.5 is refused, never cut to 0), and the training
    split holds at least two classes.
  num_classes: the number of labels, declared, not counted from the data.
  mean, std (optional, default 0 and 1): the normalisation applied after
    augmentation, one number or one per channel (images) or per feature (the
    last axis otherwise). Published constants you choose: a statistic of the
    private data here would change every normalised input when one example
    changes, outside what DP-SGD's clipping bounds.

Nothing is computed from the data but its digests (`splits.example_digest`,
of the float32 values the trainer sees): the ledger keys a dataset by the set
of its examples (`datasets.examples`), so the same examples give the same
ledger whether built in or from a factory, and each input must be a tensor
or array of numbers. That pass is also where every example is checked
(`MapSplit.example_digests`): it runs before any charge, since a private
run's ledger entry is keyed by its result, so data a run would fail on
after its charge (one NaN stops it at the step that drew it) is refused
before anything is spent.
"""

import dataclasses
import math
import numbers
from typing import Any, NoReturn, Sequence

import numpy as np
import torch

from tan_tune.errors import ConfigError
from tan_tune.training import plugins
from tan_tune.training import splits

FIELD = "dataset.factory"
_KEYS = ("train", "test", "num_classes", "mean", "std")
# Classes the training split must hold: one alone trains no classifier.
TRAIN_CLASSES = 2
# A label that is not a whole number, said without its value.
_WHOLE_LABELS = ("integer labels, or floats that are whole numbers (none is"
                 " cut to one); one is not")


@dataclasses.dataclass(frozen=True)
class UserData:
  """What a dataset factory returned, checked."""

  train: "MapSplit"
  test: "MapSplit"
  num_classes: int
  input_shape: tuple[int, ...]
  mean: tuple[float, ...]
  std: tuple[float, ...]


class MapSplit:
  """A split over a map-style dataset of (input, label), or two tensors.

  Tensors are gathered with one indexing per batch; any other dataset is
  read item by item.

  Attributes:
    num_classes: the factory's, which every label is below.
    min_classes: the labels the split must hold, at least.
    input_shape: every input's shape, the first one's.
  """

  def __init__(self, name: str, data: Any, reference: str, num_classes: int,
               input_shape: tuple[int, ...] | None = None,
               min_classes: int = 1):
    self._name = name
    self._reference = reference
    self.num_classes = num_classes
    self.min_classes = min_classes
    self._tensors = None
    if (isinstance(data, (tuple, list)) and len(data) == 2
        and all(isinstance(t, torch.Tensor) for t in data)):
      inputs, labels = data
      if len(inputs) != len(labels):
        self._refuse(f"as many labels as inputs; {len(inputs)} inputs,"
                     f" {len(labels)} labels")
      if labels.is_floating_point() and not bool(
          (labels.isfinite() & (labels == labels.trunc())).all()):
        self._refuse(_WHOLE_LABELS)
      self._tensors = (inputs.to(torch.float32), labels.to(torch.int64))
      self._data = None
    elif hasattr(data, "__getitem__") and hasattr(data, "__len__"):
      self._data = data
    else:
      self._refuse("a map-style torch Dataset of (input, label) or a pair of"
                   f" tensors; it is a {type(data).__name__}")
    if len(self) == 0:
      self._refuse("at least one example")
    first = tuple(self.example(0)[0].shape)
    if not first:
      self._refuse("inputs with at least one axis")
    if input_shape is not None and first != input_shape:
      self._refuse(f"inputs of the training split's shape {list(input_shape)};"
                   f" they are {list(first)}")
    self.input_shape = first

  def __len__(self) -> int:
    return len(self._tensors[1]) if self._tensors else len(self._data)

  def example(self, i: int) -> tuple[torch.Tensor, int]:
    """Example i as a float32 input and an integer label, checked."""
    if self._tensors:
      return self._tensors[0][i], int(self._tensors[1][i])
    item = self._data[i]
    # Errors name types, never an example's position or values.
    if not isinstance(item, (tuple, list)) or len(item) != 2:
      self._refuse("items that are (input, label) pairs; one is a"
                   f" {type(item).__name__}")
    inputs, label = item
    try:
      values = torch.as_tensor(np.asarray(inputs), dtype=torch.float32)
      whole = _whole(label)
    except (TypeError, ValueError):
      self._refuse("inputs that are tensors or arrays and integer labels, so"
                   " the ledger can fingerprint them; one has an input of"
                   f" type {type(inputs).__name__} and a label of type"
                   f" {type(label).__name__}")
    if whole is None:
      self._refuse(_WHOLE_LABELS)
    return values, whole

  def get_batch(self, indices: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
    if self._tensors:
      return self._tensors[0][indices], self._tensors[1][indices]
    pairs = [self.example(i) for i in indices.tolist()]
    return (torch.stack([x for x, _ in pairs]),
            torch.tensor([y for _, y in pairs], dtype=torch.int64))

  def example_digests(self) -> list[bytes]:
    """Each example's `splits.example_digest`, after checking it.

    Every example is read once here, before any trial and any charge: one
    input of another shape or with a NaN or an infinity, a label outside
    [0, num_classes), or fewer than `min_classes` labels, is refused. The
    message names the rule, never an example or a private value.
    """
    digests, labels = [], set()
    for i in range(len(self)):
      inputs, label = self.example(i)
      if tuple(inputs.shape) != self.input_shape:
        self._refuse(f"inputs of one shape, {list(self.input_shape)}; one"
                     f" has {list(inputs.shape)}")
      if not bool(inputs.isfinite().all()):
        self._refuse("finite inputs; one holds a NaN or an infinity")
      if not 0 <= label < self.num_classes:
        self._refuse(f"labels in [0, num_classes = {self.num_classes});"
                     " one is outside")
      labels.add(label)
      digests.append(splits.example_digest(inputs, label))
    if len(labels) < self.min_classes:
      self._refuse(f"examples of at least {self.min_classes} classes; it"
                   " has fewer")
    return digests

  def _refuse(self, allowed: str) -> NoReturn:
    raise ConfigError(FIELD, self._reference,
                      f"a factory whose '{self._name}' split has {allowed}")


def _whole(label: Any) -> int | None:
  """`label` as an int; None for a number that is not a whole one, which
  int() alone would cut (1.5 to 1) in silence.

  Raises:
    TypeError, ValueError: `label` is not a number.
  """
  if isinstance(label, numbers.Integral):
    return int(label)
  number = float(label)
  return int(number) if number.is_integer() else None


def load(reference: str, kwargs: dict[str, Any]) -> UserData:
  """Calls the factory and checks what it returned (module docstring).

  Raises:
    ConfigError: naming 'dataset.factory', for the import, the call, the
      mapping's keys, the splits, the number of classes and the
      normalisation. Each example is checked when it is fingerprinted.
  """
  parts = plugins.call(FIELD, reference, kwargs)
  if not isinstance(parts, dict) or not {"train", "test", "num_classes"} <= (
      parts.keys()) or not parts.keys() <= set(_KEYS):
    got = (sorted(parts) if isinstance(parts, dict)
           else f"a {type(parts).__name__}")
    raise ConfigError(FIELD, reference,
                      f"a factory returning a dict with train, test and"
                      f" num_classes, optionally mean and std; got {got}")
  num_classes = parts["num_classes"]
  if (not isinstance(num_classes, int) or isinstance(num_classes, bool)
      or num_classes < 2):
    raise ConfigError(FIELD, reference,
                      f"num_classes an integer >= 2; it is {num_classes!r}")
  train = MapSplit("train", parts["train"], reference, num_classes,
                   min_classes=TRAIN_CLASSES)
  input_shape = train.input_shape
  test = MapSplit("test", parts["test"], reference, num_classes, input_shape)
  width = input_shape[0] if len(input_shape) == 3 else input_shape[-1]
  mean = _constants(reference, "mean", parts.get("mean", 0.0), width)
  std = _constants(reference, "std", parts.get("std", 1.0), width)
  if min(std) <= 0:
    raise ConfigError(FIELD, reference, f"std > 0; it is {list(std)}")
  return UserData(train, test, num_classes, input_shape, mean, std)


def _constants(reference: str, key: str, value: Any,
               width: int) -> tuple[float, ...]:
  """One number, or `width` of them (channels, or the last axis)."""
  values = value if isinstance(value, Sequence) else (value,)
  try:
    values = tuple(float(v) for v in values)
  except (TypeError, ValueError):
    values = ()
  if len(values) not in (1, width) or not all(map(math.isfinite, values)):
    raise ConfigError(FIELD, reference,
                      f"{key} one number or {width} (per channel or feature);"
                      f" it is {value!r}")
  return values


def random_examples(input_shape: Sequence[int], num_classes: int,
                    train_size: int, test_size: int) -> dict[str, Any]:
  """Uniform random inputs in [0, 1) and balanced labels: a run's synthetic
  twin, timed in place of the real data (`promote/time_estimate.py`)."""
  generator = torch.Generator().manual_seed(0)

  def split(size: int) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.rand((size, *input_shape), generator=generator),
            torch.arange(size) % num_classes)

  return {"train": split(train_size), "test": split(test_size),
          "num_classes": num_classes, "mean": 0.5, "std": 0.5}
