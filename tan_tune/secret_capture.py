"""A test-only hook: the leak scanner learns the secrets a run drew.

The leak-scanning tests (`tests/test_leak_scanner.py`) look for every secret
of a private flow (its sampling, noise and dropout seeds, an audit's canary
draw, a private search's number of trials and its trials' hyper-parameters)
in every byte the flow left behind, so they must know them. When the
environment variable `ENV` names a file, which those tests keep outside
every folder they scan, each secret is appended to it as a JSON line, from
whichever process drew it (Ray workers inherit the variable). Unset, as
outside those tests, nothing happens.
"""

import json
import os
from typing import Any

ENV = "TAN_TUNE_TEST_SECRET_LOG"


def record(kind: str, value: Any) -> None:
  """Appends one secret for the tests; a no-op unless `ENV` is set."""
  path = os.environ.get(ENV)
  if path:
    with open(path, "a", encoding="utf-8") as log:
      log.write(json.dumps({"kind": kind, "value": value}) + "\n")
