"""The `tan-tune` command line's entry: the top level's --help and its
refusals need no command's module (each imports seconds of torch, Ray and
MLflow), and say what the full parser says."""

import subprocess
import sys

import pytest

from tan_tune.cli import main as cli


def test_the_top_level_help_imports_no_command_and_no_heavy_package():
  probe = ("import sys\n"
           "from tan_tune.cli import main\n"
           "try:\n"
           "  main.main(['--help'])\n"
           "except SystemExit as stop:\n"
           "  assert stop.code == 0\n"
           "print(sorted(name for name in sys.modules if name.split('.')[0] in"
           " ('torch', 'ray', 'mlflow', 'optuna', 'opacus')"
           " or name.startswith('tan_tune.cli.')))\n")
  done = subprocess.run([sys.executable, "-c", probe], capture_output=True,
                        text=True, check=True)
  assert "tan-tune privacy --dataset-size" in done.stdout  # The examples.
  assert done.stdout.splitlines()[-1] == (
      "['tan_tune.cli.args', 'tan_tune.cli.main']")


def test_the_summaries_are_what_every_commands_parser_says():
  assert (cli.build_parser().format_help()
          == cli.build_parser(*cli.COMMANDS).format_help())


@pytest.mark.parametrize("argv, says", [
    ([], "the following arguments are required: COMMAND"),
    (["nope"], "invalid choice: 'nope' (choose from 'privacy', 'train',"),
])
def test_a_missing_or_unknown_command_is_a_one_line_error(argv, says, capsys):
  with pytest.raises(SystemExit) as stop:
    cli.main(argv)
  assert stop.value.code == 2
  err = capsys.readouterr().err
  assert len(err.strip().splitlines()) == 1 and says in err, err
