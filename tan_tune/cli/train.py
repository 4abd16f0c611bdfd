"""`tan-tune train CONFIG.yaml`: one DP-SGD run from a file, with progress."""

import argparse
import json
import math
import pathlib
from typing import Any

from tan_tune import api
from tan_tune.cli import args as cli_args

_DESCRIPTION = """\
Train one model with DP-SGD from a YAML file: Poisson sampling at q = B/N
(or privacy.sampling: truncated-poisson, fixed, fixed-with-replacement),
per-example clipping of the mean gradient over K augmented copies (AugMult),
Gaussian noise sigma C, an EMA of the weights, exactly S steps. Reports test
accuracy (raw, EMA, AugTest), throughput and the epsilon spent (the sampler's
accountant, delta = 1/N).

A private run (DP-SGD, not a simulation) is charged to the privacy ledger of
--tracking-uri before it trains, like a promotion, and refused when its
dataset's budget has no room. One charge pays for one run in one place: its
checkpoints are sealed under the ledger's key, and a checkpoint is resumed
only in the folder it was charged in (or one it was moved to with
--move-from), by the same config charged in the same store, and never once
its run has finished; an edited config is refused, never ignored. Its sampling, noise and dropout are seeded
secretly, its files are owner-only, its progress bar moves at evaluations
with no clock, and its last checkpoint keeps no generator state and has
its privacy card beside it (privacy_card.md and .json in --checkpoint-dir).

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


def add_parser(commands: argparse._SubParsersAction, summary: str) -> None:
  parser = commands.add_parser(
      "train", help=summary,
      description=_DESCRIPTION, epilog=_EXAMPLES,
  )
  parser.set_defaults(run=run, option_names={"release_at": "--release-at"})
  parser.add_argument("config", type=pathlib.Path, help="the run's YAML file")
  parser.add_argument("--checkpoint-dir", type=pathlib.Path,
                      help="checkpoint here at every evaluation; a checkpoint"
                      " already there is resumed (a private run's only by the"
                      " config and store it was charged in)")
  parser.add_argument("--json", action="store_true",
                      help="print the final metrics as JSON")
  parser.add_argument("--tracking-uri",
                      default=api.DEFAULT_TRACKING_URI,
                      help="MLflow store whose privacy ledger a private run is"
                      " charged to (default: %(default)s)")
  parser.add_argument("--target-epsilon", type=cli_args.positive_float,
                      help="the dataset's privacy budget, for its first"
                      " private run in this store (default: the budget its"
                      " ledger holds)")
  parser.add_argument("--new-ledger", action="store_true",
                      help="this store has no private run on the dataset"
                      " yet: start its ledger with this run")
  parser.add_argument("--move-from", type=pathlib.Path, metavar="OLD_DIR",
                      help="a private run's checkpoint folder moved to"
                      " --checkpoint-dir (another disk, say): resume it"
                      " there; OLD_DIR, the folder it ran in on this host,"
                      " must be idle, and its checkpoint is deleted. A"
                      " copied checkpoint resumes nowhere else without it:"
                      " one charge pays for one run")
  cli_args.add_release_at(parser, "how long a private run took")


def run(args: argparse.Namespace) -> int:
  try:
    trained = api.train(
        args.config, checkpoint_dir=args.checkpoint_dir,
        tracking_uri=args.tracking_uri, target_epsilon=args.target_epsilon,
        new_ledger=args.new_ledger, progress=not args.json,
        move_from=args.move_from, release_at=args.release_at)
  except api.TrialDiverged as error:
    cli_args.fail("tan-tune train", str(error), status=1)
  if args.json:
    print(json.dumps(trained.metrics, indent=2))
  else:
    print(render(trained.metrics))
    if trained.card:
      print(f"privacy card: {trained.card}")
  return 0


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
