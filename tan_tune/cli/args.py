"""argparse pieces shared by the `tan-tune` subcommands.

Every bad value ends as one line on stderr that names the option, the value and
what is allowed, and exit status 2: argparse's own errors and ConfigError alike.
"""

import argparse
import math
import sys
from typing import Callable, NoReturn, TypeVar

from tan_tune import api
from tan_tune.errors import ConfigError

T = TypeVar("T")


class ArgumentParser(argparse.ArgumentParser):
  """An ArgumentParser whose errors are a single line, without the usage."""

  def __init__(self, *args, **kwargs):
    kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
    super().__init__(*args, **kwargs)

  def error(self, message: str) -> NoReturn:
    fail(self.prog, f"{message} (see --help)")


def fail(prog: str, message: str, status: int = 2) -> NoReturn:
  """One line on stderr, then exit: 2 for bad input, 1 for a failed run."""
  sys.stderr.write(f"{prog}: error: {message}\n")
  sys.exit(status)


def _number(text: str) -> float:
  try:
    value = float(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
  if not math.isfinite(value):
    raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
  return value


def positive_int(text: str) -> int:
  """An integer > 0; '1e5' and '72000' are both accepted."""
  value = _number(text)
  if not value.is_integer() or value <= 0:
    raise argparse.ArgumentTypeError(
        f"{text!r} is not allowed; expected a positive integer"
    )
  return int(value)


def positive_float(text: str) -> float:
  value = _number(text)
  if value <= 0:
    raise argparse.ArgumentTypeError(
        f"{text!r} is not allowed; expected a number > 0"
    )
  return value


def non_negative_float(text: str) -> float:
  value = _number(text)
  if value < 0:
    raise argparse.ArgumentTypeError(
        f"{text!r} is not allowed; expected a number >= 0"
    )
  return value


def probability(text: str) -> float:
  """A number strictly between 0 and 1, such as delta."""
  value = _number(text)
  if not 0 < value < 1:
    raise argparse.ArgumentTypeError(
        f"{text!r} is not allowed; expected a number in (0, 1)"
    )
  return value


def comma_list(item: Callable[[str], T]) -> Callable[[str], list[T]]:
  """A comma-separated list whose items are parsed by `item`."""

  def parse(text: str) -> list[T]:
    parts = [part.strip() for part in text.split(",")]
    if not all(parts):
      raise argparse.ArgumentTypeError(
          f"{text!r} is not allowed; expected a comma-separated list"
      )
    return [item(part) for part in parts]

  return parse


def release_at(text: str) -> api.ReleaseAt:
  """A release time: '+2h' from the start, or a moment to come."""
  try:
    return api.parse_release_time(text)
  except ConfigError as error:
    raise argparse.ArgumentTypeError(
        f"{text!r} is not allowed; {error.allowed}") from None


def add_release_at(parser: argparse.ArgumentParser, duration: str) -> None:
  """`--release-at` of a private run, whose `duration` tells what."""
  parser.add_argument(
      "--release-at", type=release_at, metavar="WHEN",
      help="release at a time fixed in advance: a duration from the start"
      " (+90m, +2h, +1h30m) or a moment (2025-07-01T09:00, local time). The"
      " command holds its last writes (its files' seal, its log's deletion)"
      " and its exit until then, so that the change times (ctime) of its"
      " files, which any user who can pass through their folders reads with"
      f" stat, do not tell {duration}. Choose a time it will be done by: a"
      " run done later releases then and says so in one line")
