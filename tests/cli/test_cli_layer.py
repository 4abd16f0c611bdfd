"""`tan-tune privacy` stays a calculator: neither its --help nor a real
calculation loads Ray, MLflow or Optuna, which the rest of the API needs
(`tan_tune.api` loads each name's module when first used). That cli/
imports nothing of the package but the API: `tests/project/test_layout.py`."""

import subprocess
import sys

import pytest

# The libraries of the searches and the store: seconds of imports.
_NOT_FOR_A_CALCULATOR = ("ray", "mlflow", "optuna")
# `python -m tan_tune.cli ARGV`, then the modules it loaded, on stderr (a
# name the API loads on first use does not show in -X importtime).
_PROBE = """\
import runpy, sys
try:
  runpy.run_module("tan_tune.cli", run_name="__main__", alter_sys=True)
except SystemExit as stop:
  if stop.code:
    raise
print(*sorted(sys.modules), sep="\\n", file=sys.stderr)
"""


def _imported(*argv: str) -> set[str]:
  """Every module `python -m tan_tune.cli ARGV` loaded."""
  done = subprocess.run([sys.executable, "-c", _PROBE, *argv],
                        capture_output=True, text=True, check=True)
  return set(done.stderr.split())


def _heavy(modules: set[str]) -> list[str]:
  return sorted(name for name in modules
                if name.split(".")[0] in _NOT_FOR_A_CALCULATOR)


def test_the_calculators_help_loads_neither_ray_nor_mlflow():
  modules = _imported("privacy", "--help")
  assert "tan_tune.api.choices" in modules  # Its spellings, from the API.
  assert _heavy(modules) == []


@pytest.mark.slow
def test_a_calculation_loads_neither_ray_nor_mlflow():
  modules = _imported("privacy", "--dataset-size", "50000", "--batch-size",
                      "4096", "--sigma", "3", "--steps", "2500",
                      "--target-epsilon", "8", "--sampling", "poisson,fixed")
  assert "tan_tune.api.calculator" in modules
  assert _heavy(modules) == []
