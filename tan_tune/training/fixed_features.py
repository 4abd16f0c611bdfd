"""Fixed front ends computed once per example (Tramer & Boneh, ICLR 2021).

A model may begin with a front end F that has no parameters and reads no
data (the ScatterNet's wavelet transform): its output F(x) for an example x
is the same at every step, so DP-SGD on the model f = h . F is DP-SGD on the
head h over the inputs F(x). Without augmentation each example's F(x) is
computed once, before the first step, and every step and evaluation trains
and scores h on them:

    g_i = grad_w l(h_w(F(x_i)), y_i)   (the same per-example gradient),

so the clipping, the noise and the accountant are untouched. With an
augmentation each step sees new copies aug_j(x_i), whose F must be computed
then, and the run takes the image path as before. Features of private
examples are private data: they live in memory (a search shares them
through Ray's object store, which spills inside the run's boundary) and are
never written anywhere else.

A model declares its front end by being an `nn.Sequential` whose first
module has the class attribute `fixed_front_end = True` (`declares`); the
head is the rest of the sequence, which keeps its parameter names, so
checkpoints and released weights are the whole model's.
"""

from concurrent import futures
import dataclasses
import hashlib
import json
from typing import Callable, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from tan_tune.training import datasets
from tan_tune.training import model_families
from tan_tune.training import models
from tan_tune.training import splits

# The attribute a parameter-free, data-independent module sets to say so.
DECLARATION = "fixed_front_end"
# Examples per pass through the front end when the features are computed.
_CHUNK = 256


def declares(model: nn.Module) -> bool:
  """True when `model` is an `nn.Sequential` whose first module declares
  itself a fixed front end."""
  return (isinstance(model, nn.Sequential) and len(model) > 1
          and getattr(model[0], DECLARATION, False) is True)


def head(model: nn.Module) -> nn.Sequential:
  """Everything after the declared front end, sharing the model's modules
  and keeping their names ('1.weight', ...)."""
  return model[1:]


def skipped_because(model: nn.Module, augment_family: str,
                    audited: bool) -> str | None:
  """Why a run of `model` computes its front end at every step, or None
  when it computes the features once."""
  if not declares(model):
    return "the model declares no fixed front end"
  if augment_family != "none":
    return (f"augmentation '{augment_family}' makes new copies at every"
            " step, whose features are computed then")
  if audited:
    return "an audit's canaries are images inserted at every step"
  return None


def describe(config: models.ModelConfig, input_shape: tuple[int, ...],
             num_classes: int, augment_family: str, audited: bool) -> str:
  """One line for a plan: which path a run of the model takes, and why."""
  with torch.random.fork_rng(devices=[]):  # Its weights are not needed.
    model = models.build_model(config, input_shape, num_classes)
  reason = skipped_because(model, augment_family, audited)
  if reason is None:
    return (f"the fixed front end ({type(model[0]).__name__}) is computed"
            " once per example; DP-SGD trains and scores the head on it")
  if declares(model):
    return f"the fixed front end is computed at every step: {reason}"
  return "every step runs the whole model"


def key(dataset: datasets.DatasetConfig, model: models.ModelConfig) -> str:
  """Which features these are: a digest of the dataset's and the front
  end's configuration (public settings, never the data)."""
  # Networks that differ in their heads only (the two ScatterNets) share
  # one front end, whose features a search offering both computes once.
  front_end = model_families.family_of(model).front_end(model)
  settings = {"dataset": dataclasses.asdict(dataset), "name": front_end,
              "scales": model.scales, "factory": model.factory,
              "kwargs": model.kwargs,
              "weights": model.weights}  # A factory's buffers may load.
  text = json.dumps(settings, sort_keys=True, default=str)
  return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclasses.dataclass(frozen=True, eq=False)
class SplitFeatures:
  """F(normalised x) for every example of one split, and its labels.

  numpy, not torch: Ray's object store hands numpy arrays to every process
  on a node without a copy (read-only).

  Attributes:
    features: float32 [N, ...], row i the features of example i.
    labels: int64 [N].
  """

  features: np.ndarray
  labels: np.ndarray


@dataclasses.dataclass(frozen=True, eq=False)
class Features:
  """The features of a dataset's two splits.

  Attributes:
    key: `key` of the dataset and front end they were computed for.
    train: the training split's.
    test: the test split's.
  """

  key: str
  train: SplitFeatures
  test: SplitFeatures

  @property
  def nbytes(self) -> int:
    return self.train.features.nbytes + self.test.features.nbytes


@dataclasses.dataclass(frozen=True, eq=False)
class FeatureSplit:
  """A split's examples as their features: batches of F(x) and labels.

  Attributes:
    computed: the features and labels.
    source: the split they were computed from (its examples' digests).
  """

  computed: SplitFeatures
  source: splits.Split

  def __len__(self) -> int:
    return len(self.computed.labels)

  def get_batch(
      self, indices: torch.Tensor
  ) -> tuple[torch.Tensor, torch.Tensor]:
    # Gathers copy, so the shared read-only arrays are never written.
    rows = indices.numpy()
    return (torch.from_numpy(self.computed.features[rows]),
            torch.from_numpy(self.computed.labels[rows]))

  def example_digests(self) -> list[bytes]:
    return self.source.example_digests()


def compute(data: datasets.Dataset, front_end: nn.Module, key_: str,
            device: torch.device) -> Features:
  """F(normalise(x)) for every example of both splits, a chunk at a time."""
  front_end = front_end.to(device).eval()
  normalise = datasets.normaliser(data, device)

  def transform(images: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
      return front_end(normalise(images.to(device))).cpu().numpy()

  def of(split: splits.Split) -> SplitFeatures:
    # Read here, in order: a split need not be safe to read from threads.
    batches = [split.get_batch(rows)
               for rows in torch.split(torch.arange(len(split)), _CHUNK)]
    features = _each(transform, [images for images, _ in batches], device)
    labels = [labels.numpy() for _, labels in batches]
    return SplitFeatures(np.concatenate(features), np.concatenate(labels))

  return Features(key_, of(data.train), of(data.test))


def _each(function: Callable[[torch.Tensor], np.ndarray],
          chunks: Sequence[torch.Tensor],
          device: torch.device) -> list[np.ndarray]:
  """`function` of each chunk, in order. On a CPU, as many chunks at once
  as torch has threads, each on one: a chunk's many small FFTs spread
  badly over torch's own threads, and its kernels release the GIL."""
  threads = torch.get_num_threads()
  if device.type != "cpu" or threads == 1:
    return [function(chunk) for chunk in chunks]
  torch.set_num_threads(1)
  try:
    with futures.ThreadPoolExecutor(threads) as pool:
      return list(pool.map(function, chunks))
  finally:
    torch.set_num_threads(threads)


def of_run(dataset: datasets.DatasetConfig, network: models.ModelConfig,
           data: datasets.Dataset, model: nn.Module, device: torch.device,
           shared: Mapping[str, Features] | None) -> Features:
  """A run's features: those shared with it (through Ray's object store),
  or computed here."""
  key_ = key(dataset, network)
  if shared and key_ in shared:
    return shared[key_]
  return compute(data, model[0], key_, device)


def feature_dataset(data: datasets.Dataset,
                    features: Features) -> datasets.Dataset:
  """`data` with both splits replaced by their features."""
  return dataclasses.replace(
      data, train=FeatureSplit(features.train, data.train),
      test=FeatureSplit(features.test, data.test))


def for_networks(dataset: datasets.DatasetConfig,
                 networks: list[models.ModelConfig],
                 augment_families: list[str],
                 device: torch.device) -> dict[str, Features]:
  """The features of each network's fixed front end, by `key`, to share
  with every run that may train it; none when every run augments."""
  if "none" not in augment_families:
    return {}
  shared, data = {}, None
  for network in networks:
    key_ = key(dataset, network)
    if key_ in shared:
      continue
    data = data or datasets.load_dataset(dataset)
    with torch.random.fork_rng(devices=[]):  # Its weights are not needed.
      model = models.build_model(network, data.input_shape, data.num_classes)
    if declares(model):
      shared[key_] = compute(data, model[0], key_, device)
  return shared
