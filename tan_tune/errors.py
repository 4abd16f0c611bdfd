"""The one error type for bad user input."""

from typing import Any


class ConfigError(ValueError):
  """A user-supplied value is not allowed.

  The message always names the field, the value given and what is allowed, so
  that the CLI can print it as one line and exit with status 2.
  """

  def __init__(self, field: str, value: Any, allowed: str):
    self.field = field
    self.value = value
    self.allowed = allowed
    super().__init__(f"{field}: {value!r} is not allowed; {allowed}")
