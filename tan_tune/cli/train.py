"""`tan-tune train CONFIG.yaml`: one DP-SGD run from a file, with progress."""

import argparse
import json
import math
import pathlib
from typing import Any

import tqdm

from tan_tune import config_io
from tan_tune.cli import args as cli_args
from tan_tune.private_runs import boundary
from tan_tune.private_runs import mlflow_store
from tan_tune.private_runs import private_train
from tan_tune.private_runs import release
from tan_tune.training import trial
from tan_tune.training import trial_config

_DESCRIPTION = """\
Train one model with DP-SGD from a YAML file: Poisson sampling at q = B/N
(or privacy.sampling: truncated-poisson, fixed, fixed-with-replacement),
per-example clipping of the mean gradient over K augmented copies (AugMult),
Gaussian noise sigma C, an EMA of the weights, exactly S steps. Reports test
accuracy (raw, EMA, AugTest), throughput and the epsilon spent (the sampler's
accountant, delta = 1/N).

A private run (DP-SGD, not a simulation) is charged to the privacy ledger of
--tracking-uri before it trains, like a promotion, and refused when its
dataset's budget has no room; a checkpoint is resumed only by the same
config charged in the same store; its sampling, noise and dropout are seeded
secretly, its files are owner-only, its progress bar moves at evaluations
with no clock, and its last checkpoint keeps no generator state.

A run whose privacy section names reference_batch_size simulates that larger
run: its own epsilon is not a guarantee, and is reported as not private.
"""

_EXAMPLES = """\
examples:
  tan-tune train examples/train-digits.yaml --new-ledger --target-epsilon 8  # the first
  tan-tune train examples/train-digits.yaml --checkpoint-dir runs/digits  # resumable

The YAML sections mirror tan_tune.training.trial_config.TrialConfig: dataset,
model, privacy, optim, augment, and max_physical_batch, eval_every, seed,
device.
"""


def add_parser(commands: argparse._SubParsersAction) -> None:
  parser = commands.add_parser(
      "train", help="one DP-SGD run from a YAML file",
      description=_DESCRIPTION, epilog=_EXAMPLES,
  )
  parser.set_defaults(run=run, option_names={})
  parser.add_argument("config", type=pathlib.Path, help="the run's YAML file")
  parser.add_argument("--checkpoint-dir", type=pathlib.Path,
                      help="checkpoint here at every evaluation; a checkpoint"
                      " already there is resumed (a private run's only by the"
                      " config and store it was charged in)")
  parser.add_argument("--json", action="store_true",
                      help="print the final metrics as JSON")
  parser.add_argument("--tracking-uri",
                      default=mlflow_store.DEFAULT_TRACKING_URI,
                      help="MLflow store whose privacy ledger a private run is"
                      " charged to (default: %(default)s)")
  parser.add_argument("--target-epsilon", type=cli_args.positive_float,
                      help="the dataset's privacy budget, for its first"
                      " private run in this store (default: the budget its"
                      " ledger holds)")
  parser.add_argument("--new-ledger", action="store_true",
                      help="this store has no private run on the dataset"
                      " yet: start its ledger with this run")


def run(args: argparse.Namespace) -> int:
  config = config_io.from_dict(
      trial_config.TrialConfig, config_io.load_yaml(args.config)
  )
  private = config.privacy.claims_privacy
  key = boundary.run_key("train", args.checkpoint_dir or args.config)
  # A private run's files are stamped at its start when it ends: their
  # times would time it.
  out = release.Release()
  if private:
    out.covers(args.tracking_uri,
               *([args.checkpoint_dir] if args.checkpoint_dir else []))
  with boundary.private_run(key, use_ray=False):
    charge = None
    try:
      if private:  # Charged before anything trains, or refused.
        charge = private_train.charge(
            config, args.tracking_uri, args.checkpoint_dir,
            args.target_epsilon, args.new_ledger).promotion
      try:
        result = _train(config, args.checkpoint_dir, charge, quiet=args.json)
      except trial.TrialDiverged as error:
        cli_args.fail("tan-tune train", str(error), status=1)
      if private and args.checkpoint_dir:
        private_train.forget_generators(args.checkpoint_dir)
    finally:
      out.seal()
  if args.json:
    print(json.dumps(result.metrics, indent=2))
  else:
    print(render(result.metrics))
  return 0


def _train(config: trial_config.TrialConfig,
           checkpoint_dir: pathlib.Path | None, charge: str | None,
           quiet: bool) -> trial.TrialResult:
  """The run, paid for by ledger entry `charge` if private, with a progress
  bar; a private run's moves at evaluations only and shows no rate or
  clock, which would time its steps."""
  private = config.privacy.claims_privacy
  progress = tqdm.tqdm(
      total=config.privacy.steps, unit="step", disable=quiet,
      **({"bar_format": "{l_bar}{bar}| {n_fmt}/{total_fmt} {postfix}",
          "mininterval": 0} if private else {}))

  def on_report(metrics: dict[str, Any], _: pathlib.Path | None) -> None:
    progress.set_postfix(
        acc=f"{metrics['accuracy']:.3f}",
        eps=f"{metrics['epsilon']:.3g}",
        refresh=False,
    )
    if private:
      progress.update(metrics["step"] - progress.n)

  def on_step(step: int) -> None:
    if not private:
      progress.update(step - progress.n)

  try:
    return trial.run_trial(config, report=on_report,
                           checkpoint_dir=checkpoint_dir, on_step=on_step,
                           charge=charge)
  finally:
    progress.close()


def render(metrics: dict[str, Any]) -> str:
  lines = [f"step {metrics['step']}"]
  for key in ("accuracy", "ema_accuracy", "augtest_accuracy",
              "train_loss", "examples_per_second"):
    if key in metrics:
      lines.append(f"  {key:<20} {metrics[key]:.4g}")
  if not metrics["private"] and not metrics["simulated"]:
    lines.append("  not private: trained without clipping or noise")
  elif metrics["simulated"]:
    lines.append(
        f"  epsilon {metrics['epsilon']:.4g}"
        f" ({metrics['accountant'].upper()}): NOT PRIVATE, a simulation;"
        f" the reference run would spend {metrics['reference_epsilon']:.4g}"
    )
  else:
    eps = metrics["epsilon"]
    lines.append(f"  epsilon {eps:.4g} ({metrics['accountant'].upper()},"
                 f" {metrics['adjacency']}, {metrics['sampling']})"
                 if math.isfinite(eps) else "  epsilon inf")
  return "\n".join(lines)
