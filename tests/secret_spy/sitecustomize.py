"""Test-only: each process of a scanned flow tells the leak scanner its secrets.

`leak_scan.run_flow` puts this folder on the flow's PYTHONPATH, so Python
imports this module at start-up in the `tan-tune` process and in every Ray
worker (they inherit the environment). When `LOG_ENV` names a file, which the
scanner keeps outside every folder it reads, each secret is appended to it as
a JSON line with the time it was drawn, from whichever process drew it:

- every `secrets.randbits` and `secrets.token_bytes` draw a `tan_tune` module
  makes (a run's sampling, noise, dropout and augment seeds, an audit's
  canary mask), under the name of the module that drew it;
- once `tan_tune.search.private_search` and `tan_tune.search.modes` are
  imported, a private search's sampler seed, its trial count, each trial's
  hyper-parameters and the random names Ray shows its trials by;
- once `tan_tune.training.private_score` is imported, a scored trial's
  validation split (its key and which examples it holds, as packed bits)
  and its score (the count of correct predictions under the noise, and the
  noisy score released to the search).

Nothing of this ships: the package has no hook, the test wraps its functions.
"""

import functools
import importlib.abc
import json
import os
import secrets
import sys
import time

LOG_ENV = "LEAK_SCAN_SECRET_LOG"


def _record(kind, value):
  entry = ({"kind": kind, "hex": value.hex()} if isinstance(value, bytes)
           else {"kind": kind, "value": value})
  entry["time"] = time.time()  # When: the registry must be older.
  with open(os.environ[LOG_ENV], "a", encoding="utf-8") as log:
    log.write(json.dumps(entry) + "\n")


def _spy_draw(draw):
  """`draw`, recording what it returns to a `tan_tune` caller; other callers
  (`secrets.token_hex`'s opaque names, libraries) draw no run secret."""

  @functools.wraps(draw)
  def spied(*args, **kwargs):
    value = draw(*args, **kwargs)
    caller = sys._getframe(1).f_globals  # pylint: disable=protected-access
    if caller.get("__name__", "").startswith("tan_tune."):
      _record(caller["__name__"], value)
    return value

  return spied


def _spy_result(kind, function):
  """`function`, recording what it returns as `kind`."""

  @functools.wraps(function)
  def spied(*args, **kwargs):
    value = function(*args, **kwargs)
    _record(kind, value)
    return value

  return spied


def _spy_private_search(module):
  module.draw_trial_count = _spy_result("trial_count", module.draw_trial_count)
  module.secret_seed = _spy_result("sampler_seed", module.secret_seed)
  module.opaque_name = _spy_result("trial_name", module.opaque_name)


def _spy_modes(module):
  mode = module.PrivateRandomSearch
  on_worker = mode.on_worker

  @functools.wraps(on_worker)
  def spied(self, params):
    _record("trial_params", params)
    return on_worker(self, params)

  mode.on_worker = spied


def _spy_private_score(module):
  held_out, noisy = module.held_out, module.PrivateScore.noisy

  @functools.wraps(held_out)
  def spied_split(digests, fraction, key):
    flags = held_out(digests, fraction, key)
    _record("split_key", key)
    _record("split_mask", bytes(bytearray(
        sum(bit << i for i, bit in enumerate(flags[j:j + 8].tolist()))
        for j in range(0, len(flags), 8))))
    _record("split_size", int(flags.sum()))
    return flags

  @functools.wraps(noisy)
  def spied_score(self, correct, dataset_size, generator):
    value = noisy(self, correct, dataset_size, generator)
    _record("score_count", correct)
    _record("score", value)
    return value

  module.held_out = spied_split
  module.PrivateScore.noisy = spied_score


class _AfterImport(importlib.abc.MetaPathFinder):
  """Runs a spy on a module right after the module itself has run."""

  SPIES = {"tan_tune.search.private_search": _spy_private_search,
           "tan_tune.search.modes": _spy_modes,
           "tan_tune.training.private_score": _spy_private_score}

  def find_spec(self, name, path, target=None):
    if name not in self.SPIES:
      return None
    others = (f for f in sys.meta_path if f is not self)
    spec = next((s for f in others if hasattr(f, "find_spec")
                 and (s := f.find_spec(name, path, target))), None)
    if spec is None:
      return None
    exec_module = spec.loader.exec_module

    def exec_and_spy(module):
      exec_module(module)
      self.SPIES[name](module)

    spec.loader.exec_module = exec_and_spy
    return spec


if os.environ.get(LOG_ENV):
  secrets.randbits = _spy_draw(secrets.randbits)
  secrets.token_bytes = _spy_draw(secrets.token_bytes)
  sys.meta_path.insert(0, _AfterImport())
