"""The `tan-tune` command line: one subcommand a module, registered here.

A command imports its own module only, and that module what it uses of
`tan_tune.api`, whose names load their modules when first used:
`tan-tune privacy` needs neither Ray, MLflow nor the trainer, and importing
them all costs about 10 s of CPU. The top level's --help (or a missing or
unknown command) imports none: it lists each command by its summary here.
"""

import importlib
import os
import sys

from tan_tune import api
from tan_tune.cli import args as cli_args
from tan_tune.errors import ConfigError

# MLflow's error codes for a login the server refuses (HTTP 401 and 403).
_REFUSED_LOGIN = ("UNAUTHENTICATED", "PERMISSION_DENIED")
# Seconds a tracking server has to answer before a command starts.
_PROBE_S = 10
# Each command (its module `tan_tune.cli.<name>` has its `add_parser`) and
# what --help says of it, in the order --help lists them.
COMMANDS = {
    "privacy": "TAN quantities and epsilon of a privacy triplet",
    "train": "one DP-SGD run from a YAML file",
    "search": "run a hyper-parameter search (Ray Tune + Optuna + MLflow)",
    "promote": "train the search's winner at the reference batch",
    "ledger": "what each dataset has spent in private runs",
    "audit": "a lower bound on eps from one run of the code",
    "registry": "a private model's versions, and its champion",
}

_DESCRIPTION = """\
DP-SGD hyper-parameter search at the TAN-equivalent small batch.

Search at a small batch B with sigma = sigma_ref * B / B_ref and the same steps
S (TAN Without a Burn, Sander et al. 2023), then promote the winner to the
reference (B_ref, sigma_ref, S) for one privacy-checked run.
"""

_EXAMPLES = """\
examples:
  tan-tune privacy --dataset-size 1281167 --batch-size 16384 --sigma 2.5 --steps 72000
  tan-tune privacy plot --out wall.png
  tan-tune train examples/train-digits.yaml --new-ledger --target-epsilon 8
  tan-tune search search_spaces/digits-demo.yaml
  tan-tune promote runs/digits-demo --calibrate --workers 2 --new-ledger
  tan-tune ledger
  tan-tune registry digits --champion 1 --max-epsilon 2

exit status: 0 done; 1 a run failed; 2 bad input, one line naming the field
(a tracking server that does not answer or refuses the login, a ledger key
that is missing or not the store's, an edited ledger entry: nothing
charged); 3 refused by the privacy gate or the ledger (promote).
"""

def build_parser(*in_full: str | None) -> cli_args.ArgumentParser:
  """The top-level parser: the commands named in `in_full` with all their
  options (their modules imported), every other by its summary alone (what
  the top level's --help shows)."""
  parser = cli_args.ArgumentParser(
      prog="tan-tune", description=_DESCRIPTION, epilog=_EXAMPLES
  )
  commands = parser.add_subparsers(
      dest="command", required=True, metavar="COMMAND"
  )
  for name, summary in COMMANDS.items():
    if name in in_full:
      importlib.import_module(f"tan_tune.cli.{name}").add_parser(commands,
                                                                 summary)
    else:
      commands.add_parser(name, help=summary)
  return parser

def main(argv: list[str] | None = None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  # The command is the first word that is not an option (no option of the
  # top level takes a value). Without a known one, parsing ends in --help or
  # an error, which need the commands' summaries alone.
  command = next((word for word in argv if not word.startswith("-")), None)
  # On a tracking server MLflow prints two links for every run it ends, the
  # ledger's entries too; each command prints the links that matter.
  os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
  args = build_parser(command).parse_args(argv)
  unreachable = _unreachable(getattr(args, "tracking_uri", None))
  if unreachable:
    cli_args.fail(f"tan-tune {args.command}", unreachable)
  try:
    return args.run(args)
  except ConfigError as error:
    option = args.option_names.get(error.field, error.field)
    cli_args.fail(
        f"tan-tune {args.command}",
        f"{option}: {error.value!r} is not allowed; {error.allowed}",
    )
  except api.AccountantLimit as limit:
    cli_args.fail(f"tan-tune {args.command}", str(limit))
  except Exception as error:  # pylint: disable=broad-except
    # MLflow's, read by its code: importing MLflow here would load it for
    # every command, `tan-tune privacy` too.
    code = getattr(error, "error_code", None)
    if code not in _REFUSED_LOGIN:
      raise
    cli_args.fail(
        f"tan-tune {args.command}",
        f"--tracking-uri: the tracking server refused this login ({code});"
        " set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or"
        " MLFLOW_TRACKING_TOKEN) to an account its admin made, with write"
        " access to the ledger and the searches' experiments")


def _unreachable(tracking_uri: str | None) -> str | None:
  """Why the tracking server at `tracking_uri` cannot be used, checked
  before anything is charged: MLflow itself retries a refused connection
  for minutes before it fails with a traceback. None for a server that
  answers, and for a local store."""
  if not tracking_uri or not tracking_uri.startswith(("http://", "https://")):
    return None
  import requests  # pylint: disable=g-import-not-at-top
  try:
    requests.get(f"{tracking_uri.rstrip('/')}/health", timeout=_PROBE_S)
  except requests.RequestException as error:
    return (f"--tracking-uri: no tracking server answers at {tracking_uri}"
            f" ({type(error).__name__}); start it or correct the address."
            " Nothing was charged")
  return None
