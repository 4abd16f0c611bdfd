"""What a clipping engine promises the accountant about one example.

DP-SGD's sensitivity comes from clipping, not from sampling, so each
clipping engine of `training/clipping.py` says which bound it gives
(`Engine.bound`), and a run's `SamplingScheme` carries that bound beside its
sampler and adjacency:

* `EXACT` (the 'fast' and 'vmap' engines): every example's clipped gradient
  has norm at most C; every accountant of the sampler covers it.
* `JlBound(r)` (the 'jl' engine, DP-SGD-JL): |g_i| is estimated from r random
  projections, so the clipped gradient's norm is at most C Z_r with
  Z_r = sqrt(r / chi2_r), random and heavy-tailed (P(Z_r > z) ~ z^-r). Renyi
  DP is infinite at every order; only the PLD mixture of `jl_accounting.py`
  covers it, for Poisson sampling under add/remove-one adjacency.

Each accountant declares the bound it covers beside the samplers, as its
coverage (`accountant_registry.py`).
"""

import dataclasses
from typing import Any, Mapping

from tan_tune import config_io
from tan_tune.errors import ConfigError
from tan_tune.privacy import jl_accounting


class ClippingBound:
  """The sensitivity one example's clipped gradient has."""

  # r for an engine that estimates norms from r projections; None if exact.
  projections: int | None = None

  @property
  def exact(self) -> bool:
    return self.projections is None

  def describe(self) -> str:
    """What to add to the sampler's description beside an eps."""
    return ""

  def floor(self, sampling_rate: float, sigma: float,
            delta: float) -> float | None:
    """An eps no accountant can go below whatever S; None for exact
    clipping, whose bound falls to 0 with S."""
    del sampling_rate, sigma, delta
    return None

  def params(self) -> dict[str, Any]:
    """How the bound is written in reports and ledger entries."""
    return {"jl_projections": self.projections}

  def cli_flags(self) -> str:
    """The `tan-tune privacy` flags that account for this bound."""
    return ""

  def infinite_epsilon_reason(self) -> str:
    """Why the accountant may answer eps = inf for this bound."""
    return "the accountant gives no finite eps"


@dataclasses.dataclass(frozen=True)
class ExactBound(ClippingBound):
  """|clipped g_i| <= C."""


@dataclasses.dataclass(frozen=True)
class JlBound(ClippingBound):
  """|clipped g_i| <= C Z_r, r = `projections`."""

  projections: int

  def __post_init__(self):
    if not config_io.is_count(self.projections):
      raise ConfigError("jl_projections", self.projections,
                        "expected an integer r >= 1")

  def describe(self):
    return f", JL clipping with {self.projections} projections"

  def floor(self, sampling_rate, sigma, delta):
    return jl_accounting.jl_floor(sampling_rate, sigma, delta,
                                  self.projections)

  def cli_flags(self):
    return f" --clipping jl --jl-projections {self.projections}"

  def infinite_epsilon_reason(self):
    return (f"JL clipping with r = {self.projections} projections has no"
            " finite eps from its accountant (the estimated norm's tail,"
            " P(Z_r > z) ~ z^-r, needs sensitivities beyond"
            f" {jl_accounting.MAX_CAP:g} C); raise jl_projections (`tan-tune"
            " privacy --clipping jl --jl-projections r` shows eps by r)")


EXACT = ExactBound()


def from_projections(projections: int | None) -> ClippingBound:
  """The bound of a config's `jl_projections`: None is exact clipping."""
  return EXACT if projections is None else JlBound(projections)


def from_params(params: Mapping[str, Any]) -> ClippingBound:
  """The bound `ClippingBound.params` wrote (string values, as MLflow keeps
  them); exact when absent or 'None'."""
  projections = params.get("jl_projections")
  return from_projections(
      None if projections in (None, "None") else int(projections))
