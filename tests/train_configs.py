"""A `tan-tune train` config the tests share."""

# A private digits run of 4 steps.
BASE = """\
dataset: {name: digits}
model: {name: small-cnn}
privacy: {batch_size: 64, noise_multiplier: 1.0, steps: 4}
eval_every: 2
device: cpu
"""
