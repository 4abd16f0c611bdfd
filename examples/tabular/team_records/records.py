"""The team's records: scikit-learn's bundled breast-cancer table (569
patients, 30 measurements each, malignant or benign), split once 80/20.

The model sees log(1 + x) of each measurement, a fixed transform that needs no
statistic of the data: the measurements are positive and span five orders of
magnitude (areas near 1000, fractal dimensions near 0.06), and their logs lie
between 0 and 9. The normalisation declared below maps that range to about
[-1, 1] with constants chosen from the transform, not from the patients.
"""

import numpy as np
from sklearn import datasets
from sklearn import model_selection
import torch

# log(1 + x) of a measurement between 0 and e^9: centred and scaled to
# about [-1, 1] by constants of the transform alone.
_CENTRE = 4.5
_HALF_RANGE = 4.5


def load(test_fraction: float = 0.2, seed: int = 0) -> dict:
  """The dataset factory tan_tune calls: train and test as tensor pairs."""
  table = datasets.load_breast_cancer()
  inputs = torch.from_numpy(np.log1p(table.data).astype(np.float32))
  labels = torch.from_numpy(table.target.astype(np.int64))
  train_x, test_x, train_y, test_y = model_selection.train_test_split(
      inputs, labels, test_size=test_fraction, stratify=labels,
      random_state=seed)
  return {"train": (train_x, train_y), "test": (test_x, test_y),
          "num_classes": 2, "mean": _CENTRE, "std": _HALF_RANGE}
