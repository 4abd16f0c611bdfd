"""The `tan-tune` command line: one subcommand a module, registered here.

A command imports its own module only: `tan-tune privacy` needs neither
Ray, MLflow nor the trainer, and importing them all costs seconds.
"""

import importlib
import sys

from tan_tune.cli import args as cli_args
from tan_tune.errors import ConfigError
from tan_tune.privacy import limits

# Each command's module (its `add_parser`), in the order --help lists them.
_COMMANDS = {name: f"tan_tune.cli.{name}" for name in (
    "privacy", "train", "search", "promote", "ledger", "audit", "registry")}

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
"""

def build_parser(command: str | None = None) -> cli_args.ArgumentParser:
  """The parser of every command, or of `command` alone."""
  parser = cli_args.ArgumentParser(
      prog="tan-tune", description=_DESCRIPTION, epilog=_EXAMPLES
  )
  commands = parser.add_subparsers(
      dest="command", required=True, metavar="COMMAND"
  )
  for name, module in _COMMANDS.items():
    if command in (None, name):
      importlib.import_module(module).add_parser(commands)
  return parser

def main(argv: list[str] | None = None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  # The command is the first word that is not an option (no option of the
  # top level takes a value); an unknown one gets every command's parser.
  command = next((word for word in argv if not word.startswith("-")), None)
  args = build_parser(command if command in _COMMANDS else None).parse_args(
      argv)
  try:
    return args.run(args)
  except ConfigError as error:
    option = args.option_names.get(error.field, error.field)
    cli_args.fail(
        f"tan-tune {args.command}",
        f"{option}: {error.value!r} is not allowed; {error.allowed}",
    )
  except limits.AccountantLimit as limit:
    cli_args.fail(f"tan-tune {args.command}", str(limit))
