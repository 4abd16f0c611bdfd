"""Loads user YAML into frozen config dataclasses, and writes them back out.

Every config file in the product goes through this one loader so that every
mistake in one is reported the same way: as a `ConfigError` naming the dotted
path of the field (e.g. 'privacy.batch_size'), the value given and what is
allowed, which the CLI prints as one line. The config dataclasses then only
validate meaning (ranges, combinations) in `__post_init__`; the structure and
types of the data are checked here, once, for all of them.
"""

from collections.abc import Mapping
import dataclasses
import difflib
import math
import pathlib
import re
import types
import typing
from typing import Any, TypeVar

import yaml

from tan_tune.errors import ConfigError

T = TypeVar("T")


def is_count(value: Any) -> bool:
  """An integer >= 1 (a bool is not one, though Python makes it an int)."""
  return isinstance(value, int) and not isinstance(value, bool) and value >= 1


class _Loader(yaml.SafeLoader):
  """PyYAML's safe loader with two traps of YAML 1.1 removed.

  * PyYAML follows YAML 1.1, which reads `1e-3` and `1e3` as strings (a float
    there needs a dot and a signed exponent). Learning rates are written that
    way, so floats here follow YAML 1.2, where both are floats.
  * PyYAML silently keeps the last of two equal keys; here that is an error,
    since the user cannot tell which value was used.
  """

  def construct_mapping(
      self, node: yaml.MappingNode, deep: bool = False
  ) -> dict[Any, Any]:
    seen: set[str] = set()
    for key_node, _ in node.value:
      # Merge keys ('<<') may legitimately repeat and be overridden.
      if (isinstance(key_node, yaml.ScalarNode)
          and key_node.tag != "tag:yaml.org,2002:merge"):
        if key_node.value in seen:
          raise yaml.constructor.ConstructorError(
              None, None, f"duplicate key {key_node.value!r}",
              key_node.start_mark)
        seen.add(key_node.value)
    return super().construct_mapping(node, deep=deep)


# YAML 1.2 core schema floats with an exponent but no dot. Added after the
# built-in resolvers, so plain integers still load as int.
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


class _Missing:
  """Stands for an absent value in errors, where None would read as null."""

  def __repr__(self) -> str:
    return "<missing>"


def load_yaml(path: str | pathlib.Path) -> dict[str, Any]:
  """Reads a YAML file whose top level is a mapping.

  Args:
    path: the YAML file.

  Returns:
    The file's top-level mapping, as plain Python data.

  Raises:
    ConfigError: naming the file if it cannot be read, is not valid YAML (then
      also the line and column, 1-based as editors count them) or its top
      level is not a mapping.
  """
  path = pathlib.Path(path)
  try:
    text = path.read_text(encoding="utf-8")
  except OSError as e:
    raise ConfigError(
        str(path), e.strerror, "must be a readable YAML file") from e
  except UnicodeDecodeError as e:
    raise ConfigError(
        str(path), e.object[e.start:e.end], "must be UTF-8 text") from e
  try:
    data = yaml.load(text, Loader=_Loader)
  except yaml.YAMLError as e:
    raise _yaml_error(path, text, e) from e
  if not isinstance(data, dict):
    raise ConfigError(
        str(path), data, "the top level must be a mapping of keys to values")
  return data


def _yaml_error(
    path: pathlib.Path, text: str, error: yaml.YAMLError
) -> ConfigError:
  """Points at file:line:column and shows that line, as compilers do."""
  mark = getattr(error, "problem_mark", None)
  if mark is None:
    # Only the reader's errors (e.g. control characters) carry no mark.
    return ConfigError(
        str(path), str(error).splitlines()[0], "must be valid YAML")
  lines = text.splitlines()
  line = lines[mark.line].strip() if mark.line < len(lines) else ""
  return ConfigError(
      f"{path}:{mark.line + 1}:{mark.column + 1}", line,
      f"must be valid YAML: {error.problem}")


def from_dict(cls: type[T], data: Mapping[str, Any], path: str = "") -> T:
  """Builds the dataclass `cls` from plain data such as `load_yaml` returns.

  Fields whose type is a dataclass are built recursively from nested
  mappings. Values are checked against the field types: int (an integral
  float such as 1e3 is accepted, bools are not), float (any finite number),
  bool (true or false only), str, `X | None`, `tuple[X, ...]` and fixed-length
  tuples (from lists; tuples keep frozen dataclasses hashable), `Literal[...]`,
  `dict[K, V]` and `Any`. A field's key is its name, or the `key` of its
  metadata where the file keeps a word the code uses for something else.

  Args:
    cls: the dataclass to build.
    data: a mapping from field names to values.
    path: the dotted path of `data` in the whole config, used in errors; empty
      at the top level.

  Returns:
    An instance of `cls`.

  Raises:
    ConfigError: naming the dotted path of the offending field if `data` is
      not a mapping, has a key that is not a field, lacks a field that has no
      default, or has a value of the wrong type; also whatever `cls` raises
      itself, with `path` prefixed to a field name that has no dot.
  """
  fields = {_key(f): f for f in dataclasses.fields(cls) if f.init}
  if not isinstance(data, Mapping):
    raise ConfigError(
        path or cls.__name__, data,
        f"must be a mapping with keys {', '.join(fields)}")
  for key, value in data.items():
    if key not in fields:
      raise ConfigError(_join(path, key), value, _unknown_key(key, fields))
  hints = typing.get_type_hints(cls)
  kwargs: dict[str, Any] = {}
  for key, field in fields.items():
    if key in data:
      kwargs[field.name] = _convert(hints[field.name], data[key],
                                    _join(path, key))
    elif (field.default is dataclasses.MISSING
          and field.default_factory is dataclasses.MISSING):
      raise ConfigError(
          _join(path, key), _Missing(), "required, as it has no default")
  try:
    return cls(**kwargs)
  except ConfigError as e:
    # A dotted name is already a full path chosen by the dataclass itself.
    if not path or "." in e.field:
      raise
    raise ConfigError(_join(path, e.field), e.value, e.allowed) from e


def flatten(params: dict[str, Any], prefix: str = "") -> dict[str, Any]:
  """Nested dicts under dotted keys ('reference.batch_size')."""
  flat: dict[str, Any] = {}
  for key, value in params.items():
    name = f"{prefix}.{key}" if prefix else str(key)
    if isinstance(value, dict):
      flat.update(flatten(value, name))
    else:
      flat[name] = value
  return flat


def to_dict(obj: Any) -> dict[str, Any]:
  """The inverse of `from_dict`: plain data ready for YAML, JSON or MLflow.

  Tuples become lists, which `yaml.safe_dump` and JSON accept, and
  `from_dict(type(obj), to_dict(obj)) == obj`.

  Args:
    obj: a dataclass instance.

  Returns:
    Its init fields by name, nested dataclasses as nested dicts.

  Raises:
    TypeError: if `obj` is not a dataclass instance.
  """
  if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
    raise TypeError(f"to_dict needs a dataclass instance, not {obj!r}")
  # Only init fields: from_dict could not pass the others back in.
  return {_key(f): _to_plain(getattr(obj, f.name))
          for f in dataclasses.fields(obj) if f.init}


def _key(field: dataclasses.Field) -> str:
  return field.metadata.get("key", field.name)


def _to_plain(value: Any) -> Any:
  if dataclasses.is_dataclass(value) and not isinstance(value, type):
    return to_dict(value)
  if isinstance(value, (tuple, list)):
    return [_to_plain(v) for v in value]
  if isinstance(value, Mapping):
    return {k: _to_plain(v) for k, v in value.items()}
  return value


def _join(path: str, name: Any) -> str:
  return f"{path}.{name}" if path else str(name)


def _unknown_key(key: Any, fields: Mapping[str, Any]) -> str:
  """What to tell a user who misspelled or misplaced a key."""
  allowed = f"allowed keys: {', '.join(fields) or 'none'}"
  close = difflib.get_close_matches(str(key), fields, n=1)
  if close:
    return f'unknown key, did you mean "{close[0]}"? {allowed}'
  return f"unknown key; {allowed}"


def _convert(tp: Any, value: Any, path: str) -> Any:
  """Checks `value` against the type hint `tp` and returns it as that type."""
  if tp is Any:
    return value
  if isinstance(tp, type) and dataclasses.is_dataclass(tp):
    return from_dict(tp, value, path)
  origin, args = typing.get_origin(tp), typing.get_args(tp)
  if origin in (typing.Union, types.UnionType):
    arms = [a for a in args if a is not type(None)]
    # Wider unions would need a rule for which arm wins; no config needs one.
    if len(arms) != 1 or len(args) != 2:
      raise TypeError(
          f"{path}: only `X | None` unions are supported, not {tp}")
    return None if value is None else _convert(arms[0], value, path)
  if origin is typing.Literal:
    # Compare types too: True == 1, but true is no answer to Literal[1].
    if any(value == a and type(value) is type(a) for a in args):
      return value
    raise ConfigError(path, value, f"must be one of {list(args)}")
  if origin is tuple:
    return _convert_tuple(args, value, path)
  if tp is dict or origin is dict:
    key_type, value_type = args or (Any, Any)
    if not isinstance(value, Mapping):
      raise ConfigError(path, value, "must be a mapping")
    return {_convert(key_type, k, path): _convert(value_type, v, _join(path, k))
            for k, v in value.items()}
  if tp is bool:
    if isinstance(value, bool):
      return value
    raise ConfigError(path, value, "must be true or false")
  if tp is int:
    if isinstance(value, int) and not isinstance(value, bool):
      return value
    if isinstance(value, float) and value.is_integer():
      return int(value)
    raise ConfigError(path, value, "must be an integer")
  if tp is float:
    if (isinstance(value, (int, float)) and not isinstance(value, bool)
        and math.isfinite(value)):
      return float(value)
    raise ConfigError(path, value, "must be a finite number")
  if tp is str:
    if isinstance(value, str):
      return value
    raise ConfigError(path, value, "must be a string")
  raise TypeError(f"{path}: field type {tp!r} is not supported")


def _convert_tuple(
    args: tuple[Any, ...], value: Any, path: str
) -> tuple[Any, ...]:
  """A YAML list as `tuple[X, ...]` or a fixed-length `tuple[X, Y]`."""
  if not isinstance(value, (list, tuple)):
    raise ConfigError(path, value, "must be a list")
  if len(args) == 2 and args[1] is Ellipsis:
    item_types = (args[0],) * len(value)
  elif len(value) == len(args):
    item_types = args
  else:
    raise ConfigError(path, value, f"must be a list of {len(args)} items")
  return tuple(_convert(t, v, f"{path}[{i}]")
               for i, (t, v) in enumerate(zip(item_types, value)))
