"""The `tan-tune` command line: one subcommand a module, registered here."""

from tan_tune.cli import args as cli_args
from tan_tune.cli import audit as cli_audit
from tan_tune.cli import ledger as cli_ledger
from tan_tune.cli import privacy as cli_privacy
from tan_tune.cli import promote as cli_promote
from tan_tune.cli import registry as cli_registry
from tan_tune.cli import search as cli_search
from tan_tune.cli import train as cli_train
from tan_tune.errors import ConfigError
from tan_tune.privacy import limits

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

def build_parser() -> cli_args.ArgumentParser:
  parser = cli_args.ArgumentParser(
      prog="tan-tune", description=_DESCRIPTION, epilog=_EXAMPLES
  )
  commands = parser.add_subparsers(
      dest="command", required=True, metavar="COMMAND"
  )
  cli_privacy.add_parser(commands)
  cli_train.add_parser(commands)
  cli_search.add_parser(commands)
  cli_promote.add_parser(commands)
  cli_ledger.add_parser(commands)
  cli_audit.add_parser(commands)
  cli_registry.add_parser(commands)
  return parser

def main(argv: list[str] | None = None) -> int:
  args = build_parser().parse_args(argv)
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
