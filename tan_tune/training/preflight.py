"""What a private run checks before it is charged.

A private run is charged to its dataset's ledger before it trains, and the
charge counts whether the run then finishes or fails. So whatever would fail
it once charged, and can be known without training, is refused first, in
one line naming the field:

* its delta, where the config is read (`trial_config.PrivacyConfig`: 0,
  negative, NaN, infinite, 1 or more), and above 1/N once N is known
  (`run_state.check_fits`);
* its data, as every example is read for the ledger's identity of the data
  (`user_data.MapSplit.example_digests`: a NaN or an infinity, a label not a
  whole number or out of range, an empty split, a one-class training split),
  which every charge computes before it writes anything;
* its sampler and accountant, by the charge itself, which computes the
  run's epsilon before it writes anything;
* here (`check`), what needs the data and the model together: an
  augmentation the inputs cannot take, a model that Opacus'
  `ModuleValidator` or per-sample gradients refuse (`models.build_model`),
  and a clipping engine that does not cover the model.

`run_state.RunState` checks them all again when the run starts.
"""

import torch

from tan_tune.training import clipping as clipping_lib
from tan_tune.training import datasets
from tan_tune.training import models
from tan_tune.training import trial_config


def check(config: trial_config.TrialConfig, data: datasets.Dataset) -> None:
  """Refuses the run `config` on `data` where it would fail once charged.

  Builds the model once more than the run will: seconds for the largest
  models (wrn-28-10 on CPU), against a run's hours, and it draws nothing
  from the random streams the run uses.

  Raises:
    ConfigError: an augmentation of inputs that are not images; a model
      that cannot be built, or made DP-compatible, for the data's inputs
      and classes; a clipping engine that does not cover the model.
  """
  datasets.check_augmentation(data, config.augment.family)
  with torch.random.fork_rng(devices=[]):
    model = models.build_model(config.model, data.input_shape,
                               data.num_classes)
  # 'auto' refuses nothing: it falls back to per-sample gradients. The
  # whole model, not its head alone: a fixed front end has no parameters.
  if config.clipping != "auto":
    clipping_lib.resolve(config.clipping, model,
                         config.privacy.jl_projections)
