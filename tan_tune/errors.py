"""The one error type for bad user input."""

from typing import Any


class ConfigError(ValueError):
  """A user-supplied value is not allowed.

  The message always names the field, the value given and what is allowed, so
  that the CLI can print it as one line and exit with status 2.

  Args:
    field: the field at fault ('sampling', 'model.factory', '--import-key').
    value: the value given.
    allowed: what is allowed, in words.
  """

  def __init__(self, field: str, value: Any, allowed: str):
    self.field = field
    self.value = value
    self.allowed = allowed
    super().__init__(f"{field}: {value!r} is not allowed; {allowed}")

  def __reduce__(self):
    # Rebuilt from its fields: raised on a Ray worker, it reaches the driver
    # with its message.
    return type(self), (self.field, self.value, self.allowed)
