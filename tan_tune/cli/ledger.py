"""`tan-tune ledger`: what each dataset has spent in private runs."""

import argparse
import json
import pathlib

from tan_tune import api

_DESCRIPTION = """\
List the privacy ledger of an MLflow store: every private (promoted) run,
grouped by the dataset it trained on, and each dataset's composed spend.

A dataset's runs are found by its examples, keyed with the store's secret
key, so runs from different searches (or search files) on the same data add
up; it is shown by the name it was given and its ledger id, a random id its
first charge drew: nothing computed from the data is shown. Each run counts at its
planned steps from the moment it was charged, finished or not, and whatever
became of its MLflow runs (deleted ones included); each attempt at a
promotion is its own charge, and a charge names one run, never another.
Only a charge withdrawn before its run started (it lost a race) is left
out. The composed epsilon adds the runs' Renyi DP curves (each with its own
sampler; PLDs when truncated Poisson is among them; one adjacency for all)
and converts once, at the smallest delta of the dataset's runs; the budget
is the smallest target any of them declared.
`tan-tune promote` refuses a run that would take its dataset past it.

A store has one ledger key, which keys the datasets and seals every entry;
the store holds only its id. A team shares it: the operator who makes the
first charge exports it once (--export-key FILE), puts it where the team's
people and jobs read it and nobody else does (a file of the team's group,
chmod 640; a Kubernetes Secret) and points TAN_TUNE_LEDGER_KEY_FILE at it,
or each person copies it with --import-key FILE. A charge under another
key, or a ledger entry edited without the key, is refused.
"""

_EXAMPLES = """\
examples:
  tan-tune ledger                                   # ./mlflow.db
  tan-tune ledger --tracking-uri http://127.0.0.1:5000 --json
  tan-tune ledger --tracking-uri http://mlflow:5000 --export-key team.key
  tan-tune ledger --tracking-uri http://mlflow:5000 --import-key team.key
"""


def add_parser(commands: argparse._SubParsersAction, summary: str) -> None:
  parser = commands.add_parser(
      "ledger", help=summary,
      description=_DESCRIPTION, epilog=_EXAMPLES,
  )
  parser.set_defaults(run=run, option_names={})
  parser.add_argument("--tracking-uri",
                      default=api.DEFAULT_TRACKING_URI,
                      help="the MLflow store (default: %(default)s)")
  parser.add_argument("--json", action="store_true",
                      help="print the ledger as JSON")
  key = parser.add_mutually_exclusive_group()
  key.add_argument("--export-key", type=pathlib.Path, metavar="FILE",
                   help="write the store's ledger key to a new owner-only"
                   " FILE (made if the store has no ledger yet)")
  key.add_argument("--import-key", type=pathlib.Path, metavar="FILE",
                   help="copy the team's ledger key from FILE (owner- or"
                   " group-readable only) to where this user's commands"
                   " read it")


def run(args: argparse.Namespace) -> int:
  if args.export_key:
    key_id = api.export_ledger_key(args.export_key, args.tracking_uri)
    print(f"wrote the ledger key (key id {key_id}) to {args.export_key}")
    return 0
  if args.import_key:
    place = api.import_ledger_key(args.import_key, args.tracking_uri)
    print(f"copied the ledger key to {place}")
    return 0
  report = api.ledger(args.tracking_uri)
  if args.json:
    print(json.dumps([dataset.as_dict() for dataset in report.datasets],
                     indent=2))
    return 0
  if not report.datasets:
    print(f"no private run recorded in {args.tracking_uri}")
    return 0
  print(f"ledger key id {report.key_id}")
  for dataset in report.datasets:
    print(f"dataset {dataset.dataset_name}"
          f" (ledger {dataset.ledger_id}):"
          f" {len(dataset.runs)} private run(s)")
    print(f"  {'MLflow run':<34} {'B':>7} {'sigma':>8} {'S':>7}"
          f" {'eps':>10}  sampling")
    for run_ in (entry.as_dict() for entry in dataset.runs):
      print(f"  {run_['promoted_run_id'] or 'not started':<34}"
            f" {run_['batch_size']:>7} {run_['noise_multiplier']:>8.4g}"
            f" {run_['steps']:>7} {run_['epsilon']:>10.4f}"
            f"  {run_['sampler']} ({run_['accountant'].upper()})"
            + (f", a private search of {run_['trial_count_distribution']}"
               f" mean {run_['trial_count_mean']:g} trials"
               if "trial_count_distribution" in run_ else ""))
    spent = dataset.as_dict()
    print(f"  composed: eps = {spent['composed_epsilon']:.4f} at delta ="
          f" {spent['delta']:.3g} ({spent['accountant'].upper()},"
          f" {spent['adjacency']} adjacency, {spent['sampling']});"
          f" budget {spent['budget']:g}")
  return 0
