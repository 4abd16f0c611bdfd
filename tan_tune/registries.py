"""A registry: the names of one kind of extension, and the object each names.

A kind (an Optuna sampler, a Ray Tune scheduler, ...) keeps one `Registry`;
each class registers with its `register` decorator, the built-ins as a
user's would, and a search file's spelling becomes the registered object
through `named`, the one place the name is looked up.
"""

from typing import Generic, TypeVar

from tan_tune.errors import ConfigError

Member = TypeVar("Member")


class Registry(Generic[Member]):
  """One instance of each registered class, by its `name`, in order.

  Args:
    field: the config field that spells a member, for errors.
    allowed: what an error says is allowed, `{}` the registered names.
  """

  def __init__(self, field: str, allowed: str = "one of {}"):
    self.field = field
    self._allowed = allowed
    self._members: dict[str, Member] = {}

  def register(self, cls: type) -> type:
    """Class decorator: makes one `cls()` available by `cls.name`."""
    self._members[cls.name] = cls()
    return cls

  def names(self) -> tuple[str, ...]:
    return tuple(self._members)

  def named(self, name: str) -> Member:
    """The member spelled `name`.

    Raises:
      ConfigError: none is.
    """
    if name not in self._members:
      raise ConfigError(self.field, name,
                        self._allowed.format(list(self._members)))
    return self._members[name]
