"""`tan-tune registry`: a private model's versions, and its champion."""

import argparse
import dataclasses
import json

from tan_tune import api
from tan_tune.cli import args as cli_args

_DESCRIPTION = """\
List the versions of a registered model with each one's privacy side by
side: eps at delta by the accountant the gate used, the run's test accuracy
and the largest eps_lb of an audit of the same configuration, if one ran.

With --champion VERSION --max-epsilon EPS, move the alias `champion` onto
the version, only if it has a privacy card (it was registered by
`tan-tune promote --register`), its run finished, and its eps is at most
EPS. Aliases only: MLflow's stages are deprecated. Then load or serve it as
models:/NAME@champion. --card VERSION prints the version's privacy card.

exit status: 0 done, 2 bad input, 3 refused (unknown model or version, no
privacy card, no trained model, eps over --max-epsilon).
"""

_EXAMPLES = """\
examples:
  tan-tune registry digits-demo --tracking-uri sqlite:///runs/demo/mlflow.db
  tan-tune registry digits-demo --champion 1 --max-epsilon 2
  tan-tune registry digits-demo --card 1
"""


def add_parser(commands: argparse._SubParsersAction, summary: str) -> None:
  parser = commands.add_parser(
      "registry", help=summary,
      description=_DESCRIPTION, epilog=_EXAMPLES,
  )
  parser.set_defaults(run=run, option_names={})
  parser.add_argument("name", metavar="NAME", help="the registered model")
  parser.add_argument("--champion", metavar="VERSION",
                      help="move the alias champion onto this version")
  parser.add_argument("--card", metavar="VERSION",
                      help="print this version's privacy card")
  parser.add_argument("--max-epsilon", type=cli_args.positive_float,
                      metavar="EPS",
                      help="with --champion: the largest eps it may have")
  parser.add_argument("--tracking-uri",
                      default=api.DEFAULT_TRACKING_URI,
                      help="the MLflow store (default: %(default)s)")
  parser.add_argument("--json", action="store_true",
                      help="print the versions as JSON")


def run(args: argparse.Namespace) -> int:
  prog = "tan-tune registry"
  if (args.champion is None) != (args.max_epsilon is None):
    cli_args.fail(prog, "--champion and --max-epsilon go together: the"
                  " champion's eps must be within a limit you give")
  try:
    if args.card is not None:
      print(api.card(args.name, args.card, tracking_uri=args.tracking_uri),
            end="")
      return 0
    if args.champion is not None:
      row = api.champion(args.name, args.champion, args.max_epsilon,
                         tracking_uri=args.tracking_uri)
      print(f"{args.name} version {row.version} is the champion: eps ="
            f" {row.epsilon:.4g} at delta = {row.delta:.3g}"
            f" ({row.accountant}) <= {args.max_epsilon:g}; load"
            f" models:/{args.name}@champion")
      return 0
    rows = api.registry(args.name, tracking_uri=args.tracking_uri)
  except api.RegistryRefused as refusal:
    cli_args.fail(prog, f"refused: {refusal}", status=3)
  if args.json:
    print(json.dumps([dataclasses.asdict(row) for row in rows], indent=2))
    return 0
  print(f"{'version':>7}  {'aliases':<20} {'status':<9} {'eps':>8}"
        f" {'delta':>9}  {'accountant':<10} {'test accuracy':<22}"
        f" {'audit eps_lb':>12}")
  for row in rows:
    print(f"{row.version:>7}  {','.join(row.aliases) or '-':<20}"
          f" {row.status or '-':<9} {_number(row.epsilon, '.4g'):>8}"
          f" {_number(row.delta, '.3g'):>9}  {row.accountant or 'no card':<10}"
          f" {_accuracy(row):<22} {_number(row.audit, '.3f'):>12}")
  return 0


def _number(value: float | None, spec: str) -> str:
  return "-" if value is None else format(value, spec)


def _accuracy(row: api.VersionRow) -> str:
  if row.accuracy is None:
    return "-"
  return f"{row.accuracy:.4f} ({row.metric})"
