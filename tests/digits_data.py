"""sklearn's digits three ways, and the fingerprint the ledger used to publish.

The factory `digits_floats` hands the built-in digits back as float tensors
(`dataset.factory: digits_data:digits_floats`), as a team's own code would;
`old_fingerprint_windows` lists every 8-hex-digit window of the unkeyed
SHA-256 of the examples' digests that earlier versions wrote into the
ledger's tags, the promoted run's params, resolved.json and printed lines:
none of them may appear anywhere now.
"""

import hashlib

import torch

from tan_tune.training import datasets

DIGITS = datasets.DatasetConfig("digits")
# Hex digits in a window a leak check looks for.
WINDOW = 8


def digits_floats(dtype: str = "float32",
                  negative_zeros: bool = False) -> dict:
  """The built-in digits (the same split) as float tensors in [0, 1], in
  `dtype`; with `negative_zeros`, every 0.0 stored as -0.0."""
  data = datasets.load_dataset(DIGITS)

  def split(part) -> tuple[torch.Tensor, torch.Tensor]:
    images, labels = part.get_batch(torch.arange(len(part)))
    images = images.to(getattr(torch, dtype))
    if negative_zeros:
      images = torch.where(images == 0, -0.0, images)
    return images, labels

  return {"train": split(data.train), "test": split(data.test),
          "num_classes": 10, "mean": 0.5, "std": 0.5}


def old_fingerprint() -> str:
  """SHA-256 of the sorted old per-example digests of the digits: blake2b-128
  of the uint8 levels and the int64 label (4ce557df34e0... on digits)."""
  data = datasets.load_dataset(DIGITS)
  digests = []
  for split in (data.train, data.test):
    images = split.images.reshape(len(split), -1).numpy()
    for image, label in zip(images, split.labels.numpy()):
      digest = hashlib.blake2b(digest_size=16)
      digest.update(image.tobytes())
      digest.update(int(label).to_bytes(8, "little"))
      digests.append(digest.digest())
  return hashlib.sha256(b"".join(sorted(digests))).hexdigest()


def old_fingerprint_windows() -> set[str]:
  """Every 8-hex-digit window of `old_fingerprint`."""
  full = old_fingerprint()
  return {full[i:i + WINDOW] for i in range(len(full) - WINDOW + 1)}


def leaked_windows(text: str) -> set[str]:
  """The windows of the old fingerprint found in `text` (any case)."""
  text = text.lower()
  return {window for window in old_fingerprint_windows() if window in text}
