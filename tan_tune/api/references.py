"""Python callables given as factories, turned into the references that Ray's
workers import ('package.module:attribute').

A search's trials and its promoted run train in other processes (Ray's
workers, on this machine or on a cluster's nodes), and a resumed search
rebuilds them from the search directory. Both need the factory by name, not
by a pickled object, so a callable is accepted where its name leads back to
it: a function or class defined at the top level of an importable module.
A function of the script being run (`__main__`) is named by the script's
file in the command's folder, as `multiprocessing`'s spawn start method
imports it: the script must guard its entry point with
`if __name__ == "__main__":`. Lambdas and closures have no such name and are
refused.
"""

import copy
import os
import pathlib
import sys
from typing import Any, Callable, Mapping

from tan_tune.errors import ConfigError
from tan_tune.training import plugins

# The sections of a search file or trial config that may name a factory.
SECTIONS = ("model", "dataset", "public_dataset")


def reference_of(field: str, factory: Callable[..., Any]) -> str:
  """The reference 'module:qualified.name' that resolves to `factory`.

  Raises:
    ConfigError: naming `field`, when no import leads back to it.
  """
  module = getattr(factory, "__module__", None)
  name = getattr(factory, "__qualname__", "")
  in_script = module == "__main__"
  if in_script:
    module = _main_module_name(field, factory)
  if not module or not name or "<" in name:
    raise ConfigError(
        field, factory, "a function or class defined at the top level of an"
        " importable module (Ray's workers import it by name; a lambda or a"
        " closure has none), or a reference " + plugins.FORM)
  reference = f"{module}:{name}"
  try:
    found = plugins.resolve(field, reference)
  except ConfigError:
    found = None
  # The script imported as a module is a second copy of it.
  same = (getattr(found, "__qualname__", None) == name if in_script
          else found is factory)
  if not same:
    raise ConfigError(field, factory,
                      f"a callable that {reference!r} imports back to, as"
                      " Ray's workers will; that name leads elsewhere")
  return reference


def with_references(config: Mapping[str, Any]) -> dict[str, Any]:
  """A copy of a search file's or trial config's mapping, each callable
  factory replaced by its reference."""
  named = copy.deepcopy(dict(config))
  for section in SECTIONS:
    part = named.get(section)
    if isinstance(part, dict) and callable(part.get("factory")):
      part["factory"] = reference_of(f"{section}.factory", part["factory"])
  return named


def _main_module_name(field: str, factory: Callable[..., Any]) -> str:
  """The name under which the running script imports from its folder."""
  main = sys.modules["__main__"]
  path = getattr(main, "__file__", None)
  if not path or pathlib.Path(path).resolve().parent != pathlib.Path(
      os.getcwd()).resolve():
    raise ConfigError(
        field, factory, "a function of an importable module: this one is"
        " defined in an interactive session or in a script outside the"
        " command's folder, which Ray's workers cannot import; move it into a"
        " module beside the script")
  return pathlib.Path(path).stem
