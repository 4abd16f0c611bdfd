"""`tan-tune privacy`: the TAN calculator, and `tan-tune privacy plot`."""

import argparse
import json
import math
import pathlib

from tan_tune import api
from tan_tune.api import calculator
from tan_tune.cli import args as cli_args
from tan_tune.cli import privacy_tables
from tan_tune.errors import ConfigError

_DESCRIPTION = """\
Privacy of a DP-SGD triplet (N, B, sigma, S), by default with Poisson sampling
at q = B/N and add/remove-one adjacency.

Prints q, eta (eta^2 = q^2 S / (2 sigma^2)), eps_TAN = eta^2 + 2 eta sqrt(log 1/delta),
epsilon from every accountant of the sampler (RDP, PRV and PLD for Poisson), and
the privacy-wall regime: eps ~ eps_TAN only while sigma >= 2. With several
--sampling values, the samplers side by side: eps under each adjacency and
accountant, the sigma each needs for --target-epsilon, and whether TAN's eta law
holds for it (eps again at B/2 and sigma/2, the same eta). With --clipping jl,
norms are estimated from r random projections (DP-SGD-JL): the sensitivity is
random, RDP is infinite, and eps comes from JL's PLD accountant (PLD-JL), shown
for each r beside exact clipping and the floor no accountant can beat. With
--private-search, a random search of trials at the reference run priced end
to end: K trials ~ a truncated negative binomial D(eta, gamma) (eta = 0
logarithmic, 1 geometric) or Poisson of the given mean, the best released;
eps under both selection bounds (RDP and the privacy profile) and the
smaller, and with --target-epsilon the law that leaves each trial the most
room (the smallest sigma).
"""

_EXAMPLES = """\
examples:
  # the TAN paper's ImageNet run, simulated at B = 128 (128x less compute)
  tan-tune privacy --dataset-size 1281167 --batch-size 16384 --sigma 2.5 \\
      --steps 72000 --simulate-batch-size 128
  # the sigma that spends eps = 8, and constant-eta alternatives (table 3)
  tan-tune privacy --dataset-size 1281167 --batch-size 16384 --steps 72000 \\
      --target-epsilon 8 --steps-grid 9000,18000,72000,288000
  # what fixed-size or capped batches cost on the CIFAR-10 reference
  tan-tune privacy --dataset-size 50000 --batch-size 4096 --sigma 3 \\
      --steps 2500 --delta 1e-5 --target-epsilon 8 \\
      --sampling poisson,truncated-poisson,fixed,fixed-with-replacement
  # what JL clipping costs in eps at r = 4, 10, 32, 100 projections
  tan-tune privacy --dataset-size 50000 --batch-size 4096 --sigma 3 \\
      --steps 2500 --delta 1e-5 --clipping jl --jl-projections 4,10,32,100
  # the price of choosing hyper-parameters privately: 10 or 30 expected
  # trials, each scored by a count of correct validation predictions plus
  # Gaussian noise of std 20; the sigma each trial may run at for eps = 8
  tan-tune privacy --dataset-size 50000 --batch-size 4096 --sigma 3 \\
      --steps 2500 --delta 1e-5 --private-search 10,30 --target-epsilon 8 \\
      --score-noise 20
  # the same search with K's law of your choosing (eta 0.25, 3)
  tan-tune privacy --dataset-size 50000 --batch-size 4096 --sigma 3 \\
      --steps 2500 --delta 1e-5 --private-search 10 --trial-shapes 0.25,3
  # eps against sigma at constant eta: the privacy wall (figure 2)
  tan-tune privacy plot --out wall.png --sampling poisson,fixed

Simulated runs are not private: their own eps is shown only to say so. A
search of simulated trials is not accounted (TAN paper, section 5.2): the
eps shown is the promoted run's alone; --private-search shows the price of a
search that is.
"""

# ConfigError fields named by the option a user typed.
_OPTION_NAMES = {
    "dataset_size": "--dataset-size",
    "batch_size": "--batch-size",
    "noise_multiplier": "--sigma",
    "steps": "--steps",
    "delta": "--delta",
    "target_epsilon": "--target-epsilon",
    "simulate_batch_size": "--simulate-batch-size",
    "steps_grid": "--steps-grid",
    "beta": "--dataset-scales",
    "eta": "--eps-tan",
    "accountant": "--accountant",
    "sampling": "--sampling",
    "jl_projections": "--jl-projections",
    "trial_count.mean": "--private-search",
    "score_noise": "--score-noise",
    "trial_shapes": "--trial-shapes",
}


def add_parser(commands: argparse._SubParsersAction, summary: str) -> None:
  parser = commands.add_parser(
      "privacy", help=summary,
      description=_DESCRIPTION,
      epilog=_EXAMPLES,
  )
  parser.set_defaults(run=run, option_names=_OPTION_NAMES)
  parser.add_argument("--dataset-size", type=cli_args.positive_int, metavar="N",
                      help="training-set size N (q = B / N)")
  parser.add_argument("--batch-size", type=cli_args.positive_int, metavar="B",
                      help="expected batch size B of the reference run")
  parser.add_argument("--sigma", type=cli_args.positive_float, metavar="SIGMA",
                      help="noise multiplier (optional with --target-epsilon)")
  parser.add_argument("--steps", type=cli_args.positive_int, metavar="S",
                      help="number of DP-SGD steps")
  parser.add_argument("--delta", type=cli_args.probability,
                      help="delta (default 1/N, as in the paper)")
  parser.add_argument("--accountant", choices=api.accountant_names(),
                      help="accountant for --target-epsilon and the tables"
                      " (default: the sampler's, rdp for Poisson)")
  parser.add_argument("--sampling", type=_samplers,
                      default=[api.DEFAULT_SAMPLER],
                      metavar="SAMPLER[,SAMPLER...]",
                      help="how batches are drawn: "
                      f"{', '.join(api.sampler_names())} (default"
                      " poisson); the first is the reference run's, several"
                      " are compared side by side")
  parser.add_argument("--clipping", choices=api.CLIPPINGS,
                      default=api.Clipping.EXACT.value,
                      help="exact per-example norms (default) or jl: norms"
                      " estimated from random projections, accounted by"
                      " PLD-JL (Poisson add/remove only)")
  parser.add_argument("--jl-projections",
                      type=cli_args.comma_list(cli_args.positive_int),
                      metavar="R[,R...]",
                      help="with --clipping jl: the projections r; the first"
                      " is the reference run's, several are compared")
  parser.add_argument("--simulate-batch-size",
                      type=cli_args.comma_list(cli_args.positive_int),
                      metavar="B[,B...]",
                      help="simulate at these batch sizes: sigma = sigma_ref B"
                      " / B_ref, same S")
  parser.add_argument("--target-epsilon", type=cli_args.positive_float,
                      metavar="EPS",
                      help="calibrate sigma to spend at most EPS")
  parser.add_argument("--steps-grid",
                      type=cli_args.comma_list(cli_args.positive_int),
                      metavar="S[,S...]",
                      help="constant-eta alternatives at fixed sigma: B ="
                      " B_ref sqrt(S_ref / S), lr x S_ref / S")
  parser.add_argument("--dataset-scales",
                      type=cli_args.comma_list(cli_args.positive_float),
                      metavar="BETA[,BETA...]",
                      help="what if N were BETA x N (delta / BETA), same B,"
                      " sigma, S (table 5)")
  parser.add_argument("--private-search",
                      type=cli_args.comma_list(cli_args.positive_float),
                      metavar="MEAN[,MEAN...]",
                      help="what a private random search (Papernot & Steinke)"
                      " of the reference run costs end to end with MEAN"
                      " expected trials: eps for each law of the number of"
                      " trials (--trial-shapes, Poisson) under both selection"
                      " bounds and, with --target-epsilon, the sigma each"
                      " trial may run at (Poisson, exact clipping)")
  parser.add_argument("--score-noise", type=cli_args.positive_float,
                      metavar="S",
                      help="with --private-search: the standard deviation of"
                      " the Gaussian on each trial's count of correct"
                      " validation predictions (default: none, trials scored"
                      " on public data)")
  parser.add_argument("--trial-shapes", type=cli_args.comma_list(_trial_shape),
                      metavar="ETA[,ETA...]",
                      help="with --private-search: the etas > -1 of K's"
                      " truncated negative binomial to price beside Poisson"
                      " (0 logarithmic, 1 geometric; default"
                      f" {','.join(f'{e:g}' for e in calculator.SEARCH_SHAPES)})")
  parser.add_argument("--json", action="store_true",
                      help="print the same as JSON")

  plot_commands = parser.add_subparsers(dest="privacy_command",
                                        metavar="{plot}")
  plot = plot_commands.add_parser(
      "plot",
      help="plot eps against sigma at constant eta (the privacy wall)",
      description="eps against sigma at constant eta, one curve per S (TAN"
      " paper figure 2): flat near eps_TAN for sigma >= 2, surging below.",
  )
  plot.set_defaults(run=run_plot)
  plot.add_argument("--out", type=pathlib.Path, required=True,
                    help="PNG file to write")
  plot.add_argument("--dataset-size", type=cli_args.positive_int,
                    default=1281167, metavar="N",
                    help="N (default 1281167, ImageNet)")
  plot.add_argument("--eps-tan", type=cli_args.positive_float, default=8.0,
                    help="choose eta so that eps_TAN equals this (default 8)")
  plot.add_argument("--delta", type=cli_args.probability,
                    help="delta (default 1/N)")
  plot.add_argument("--steps-grid",
                    type=cli_args.comma_list(cli_args.positive_int),
                    default=[9000, 18000, 72000, 288000], metavar="S[,S...]",
                    help="one curve per S (default 9000,18000,72000,288000)")
  plot.add_argument("--accountant", choices=api.accountant_names(),
                    help="default: each sampler's own (rdp for Poisson)")
  plot.add_argument("--sampling", type=_samplers,
                    default=[api.DEFAULT_SAMPLER],
                    metavar="SAMPLER[,SAMPLER...]",
                    help="one panel per sampler (default poisson)")


def _samplers(text: str) -> list[api.DpSampler]:
  try:
    return [api.parse_sampler(name.strip()) for name in text.split(",")]
  except ConfigError as error:
    raise argparse.ArgumentTypeError(
        f"{error.value!r}: expected samplers among"
        f" {', '.join(api.sampler_names())}") from None


def _trial_shape(text: str) -> float:
  try:
    eta = float(text)
  except ValueError:
    eta = math.nan
  if not -1 < eta < math.inf:
    raise argparse.ArgumentTypeError(
        f"{text!r} is not allowed; expected a number eta > -1 (0 the"
        " logarithmic law, 1 the geometric)")
  return eta


def run(args: argparse.Namespace) -> int:
  for option in ("dataset_size", "batch_size", "steps"):
    if getattr(args, option) is None:
      cli_args.fail("tan-tune privacy", f"{_OPTION_NAMES[option]} is required"
                    " (see --help)")
  if args.sigma is None and args.target_epsilon is None:
    cli_args.fail("tan-tune privacy",
                  "--sigma is required unless --target-epsilon is given"
                  " (see --help)")
  clipping = api.Clipping(args.clipping)
  if clipping.projected != bool(args.jl_projections):
    cli_args.fail("tan-tune privacy",
                  "--jl-projections R[,R...] goes with --clipping jl, and"
                  " --clipping jl needs it")
  if args.private_search and not api.private_search_accounted(
      args.sampling[0], clipping):
    cli_args.fail("tan-tune privacy", "--private-search is accounted for"
                  " --sampling poisson with exact clipping only")
  for option in ("score_noise", "trial_shapes"):
    if getattr(args, option) is not None and not args.private_search:
      cli_args.fail("tan-tune privacy", f"{_OPTION_NAMES[option]} goes with"
                    " --private-search MEAN[,MEAN...]")
  if clipping.projected and len(args.sampling) > 1:
    cli_args.fail("tan-tune privacy", "--clipping jl is accounted for"
                  " --sampling poisson only: compare samplers without it")
  result = api.calculate(
      args.dataset_size, args.batch_size, args.sigma, args.steps,
      delta=args.delta, accountant=args.accountant, sampling=args.sampling,
      jl_projections=args.jl_projections or (),
      simulate_batch_sizes=args.simulate_batch_size or (),
      target_epsilon=args.target_epsilon, steps_grid=args.steps_grid or (),
      dataset_scales=args.dataset_scales or (),
      private_search=args.private_search or (),
      score_noise=args.score_noise,
      trial_shapes=args.trial_shapes)
  print(json.dumps(result, indent=2) if args.json
        else privacy_tables.render(result))
  return 0


def run_plot(args: argparse.Namespace) -> int:
  api.privacy_wall(args.out, args.dataset_size, args.eps_tan,
                   args.steps_grid, delta=args.delta,
                   accountant=args.accountant, samplers=args.sampling)
  print(f"wrote {args.out}")
  return 0
