"""One DP-SGD training run with the TAN paper's recipe, without Ray.

`run_trial` trains for exactly S logical steps of Poisson-sampled batches with
DP-SGD and augmentation multiplicity (`dp_sgd.py`), an EMA of the weights
(`ema.py`), and evaluates the raw weights, the EMA weights and AugTest (a
majority vote over K training augmentations of each test image, section 4.2).
Search trials, `tan-tune train` and the promoted reference run all call it.

A run is a simulation when it names a reference batch size B_ref (even
B_ref = B: a search trial is never accounted): its sigma then stands for
sigma_ref = sigma B_ref / B at the same S. Its own epsilon is reported with
`private: False`, beside the epsilon the reference run would spend; only the
latter is ever a number to quote. A simulation may evaluate on a validation
split held out of the training set (`validation_fraction`), which is what a
search selects on.

A private run (DP-SGD, not a simulation) is the one whose outputs the
accountant covers, so it publishes nothing else: its reports hold the step,
held-out accuracies and epsilon (`run_state.PRIVATE_METRICS`), never the
training loss, the clip fraction, realised batch sizes or throughput, and its
sampling and noise are seeded from the OS's secret source (`seeds.py`). A
private search's trial (`config.score`) trains on part of the training set
and reports, in place of accuracies, one DP score of its last weights on the
rest (`private_score.py`).

Sampling, noise and dropout draw from generators whose states are
checkpointed (the dropout one reseeds torch's at every step, per rank);
augmentation is keyed by (seed, step, example): one example's copies ignore
the other examples.
A run stopped at step s and resumed ends with the same weights as one that was
never stopped. Checkpoints are written owner-only: a private run's hold its
secret generator states.

The same function trains the promoted run data-parallel (`promote/worker.py`):
with `world_size` workers, each draws the same Poisson batch (same sampling
seed), takes every `world_size`-th example of it from position `rank`, and
`dp_sgd.DPSGD` all-reduces the clipped sums before the noise every worker adds
alike. Only rank 0 evaluates and checkpoints; every rank resumes from its
checkpoint.
"""

import dataclasses
import pathlib
from typing import Any, Callable, Mapping

import torch
from torch import nn

from tan_tune.training import checkpoint_file
from tan_tune.training import fixed_features
from tan_tune.training import run_state
from tan_tune.training.checkpoint_file import CHECKPOINT_FILE
from tan_tune.training.trial_config import TrialConfig


class TrialDiverged(RuntimeError):
  """The weights became NaN or infinite: the run stops (a private run at
  its next evaluation) and saves nothing more."""


def _diverged(step: int, private: bool) -> TrialDiverged:
  """The error of a run whose weights are not finite after `step`. A
  private run's names no step: the step a bad batch broke it at is the
  secret sampling's (the first that drew a bad row), outside its release."""
  when = "" if private else f" after step {step}"
  return TrialDiverged(
      f"the weights are not finite{when}: the run diverged and was stopped"
      " (lower lr, or check the data)")


@dataclasses.dataclass(frozen=True)
class TrialResult:
  """The last report of a finished run, and every report before it; an
  audited run's canary scores (`canaries.Canaries.scores`) on rank 0."""

  metrics: dict[str, Any]
  history: list[dict[str, Any]]
  canary_scores: dict[str, Any] | None = None


Report = Callable[[dict[str, Any], pathlib.Path | None], None]


def run_trial(
    config: TrialConfig,
    report: Report | None = None,
    checkpoint_dir: str | pathlib.Path | None = None,
    on_step: Callable[[int], None] | None = None,
    rank: int = 0,
    world_size: int = 1,
    seal: checkpoint_file.Seal | None = None,
    shared_features: Mapping[str, fixed_features.Features] | None = None,
    split_key: bytes | None = None,
) -> TrialResult:
  """Trains one model with DP-SGD and reports its metrics as it goes.

  Args:
    config: the run.
    report: called at every evaluation with the metrics and, when
      `checkpoint_dir` is set, the directory of a checkpoint taken just before.
      On ranks other than 0 the metrics hold only the step.
    checkpoint_dir: where to checkpoint; a checkpoint already there is resumed.
    on_step: called after every logical step with the number of steps done
      (progress bars).
    rank: this worker's place among `world_size` data-parallel workers.
    world_size: the number of workers; above 1, `torch.distributed` must be
      initialised (Ray Train does it).
    seal: a private run's checkpoint seal (`checkpoint_file.Seal`): its
      checkpoints are sealed under the key of the charge paying for it,
      and a checkpoint not sealed under that key is refused.
    shared_features: fixed front ends' features computed once for many
      runs (a search's trials), by `fixed_features.key`; a run whose
      features are not there computes its own.
    split_key: a scored trial's (`config.score`) secret key of its
      validation split (`private_score.py`).

  Raises:
    ConfigError: the config does not fit the data (B > N, say).
    CheckpointRefused: the checkpoint in `checkpoint_dir` is not sealed
      under `seal`, or is sealed and `seal` is None.
    TrialDiverged: the weights became non-finite (a private run says so at
      the next evaluation, naming no step).
  """
  run = run_state.RunState(config, rank, world_size, seal, shared_features,
                           split_key)
  checkpoint_dir = pathlib.Path(checkpoint_dir) if checkpoint_dir else None
  if checkpoint_dir and (checkpoint_dir / CHECKPOINT_FILE).exists():
    run.load(checkpoint_dir / CHECKPOINT_FILE)
  steps = config.privacy.steps
  private = config.privacy.claims_privacy
  while run.step < steps:
    run.train_step()
    evaluates = run.step % config.eval_every == 0 or run.step == steps
    # The weights, not the loss: a private run may act on its DP output
    # only, and at its evaluations only, whose steps are public: it stops
    # at the first one after it diverged, whichever secret step it was.
    if (evaluates or not private) and not all_finite(run.model):
      raise _diverged(run.step, private)
    if on_step:
      on_step(run.step)
    if evaluates:
      if world_size > 1:
        check_replicas_agree(run.model, run.step)
      metrics = run.evaluate()
      if checkpoint_dir and rank == 0:
        run.save(checkpoint_dir)
      if report:
        report(metrics, checkpoint_dir)
  if not run.history:  # Resumed from a checkpoint of the finished run.
    run.history.append(run.evaluate())
  scores = None
  if run.canaries and rank == 0:  # The audit's scores, from the final model.
    scores = run.canaries.scores(run.model, run.normalise,
                                 config.max_physical_batch)
  return TrialResult(metrics=run.history[-1], history=list(run.history),
                     canary_scores=scores)


def test_accuracies(config: TrialConfig,
                    weights: Mapping[str, Any]) -> dict[str, float]:
  """The test-split accuracies of a finished run of `config` whose weights
  are `weights["model"]` and `weights["ema"]`: a private search's release
  measured once, on data its selection never saw."""
  run = run_state.RunState(dataclasses.replace(config, score=None))
  run.model.load_state_dict(weights["model"])
  if run.ema:
    run.ema.load_state_dict(weights["ema"])
  return run.accuracies()


def check_replicas_agree(model: nn.Module, step: int) -> None:
  """Every data-parallel replica must hold the same weights.

  They do only if every rank sampled the same batch and drew the same noise
  (the secret seeds are broadcast from rank 0); a checksum per rank catches
  any divergence before anything is evaluated or saved.
  """
  checksum = torch.stack(
      [p.detach().double().sum() for p in model.parameters()]).sum().view(1)
  gathered = [torch.empty_like(checksum)
              for _ in range(torch.distributed.get_world_size())]
  torch.distributed.all_gather(gathered, checksum)
  if not torch.allclose(torch.cat(gathered), checksum, rtol=1e-9, atol=0):
    raise RuntimeError(
        f"data-parallel replicas disagree at step {step}: weight checksums"
        f" {[float(c) for c in gathered]}")


def all_finite(model: nn.Module) -> bool:
  """One device sync for the whole model, not one per parameter."""
  finite = [p.isfinite().all() for p in model.parameters()]
  return bool(torch.stack(finite).all()) if finite else True
