"""One place that gathers everything tan_tune says about a triplet's privacy.

The CLI prints it, `--json` serialises it, the search logs it on its parent run
and promote shows it in its plan, so they all say the same thing.
"""

import dataclasses
from typing import Any

from tan_tune.privacy import accounting
from tan_tune.privacy import limits
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.privacy.sampling_scheme import POISSON, SamplingScheme


@dataclasses.dataclass(frozen=True)
class PrivacyReport:
  """A triplet's TAN quantities, its epsilons and its regime.

  Attributes:
    triplet: the privacy triplet (N, B, sigma, S).
    delta: the delta every epsilon is paired with.
    eps_tan: eta^2 + 2 eta sqrt(log(1/delta)), the TAN approximation.
    epsilons: the accountant's report, by accountant name.
    regime: the privacy-wall regime (figure 2).
    scheme: the sampler and adjacency every epsilon is for.
    jl_floor: JL clipping only: the least eps any accountant can give it, at
      any S (one step, one sampled example).
    unavailable: accountants that cannot compute this setting, and why
      (`limits.AccountantLimit`); they have no entry in `epsilons`.
  """

  triplet: triplet_lib.PrivacyTriplet
  delta: float
  eps_tan: float
  epsilons: dict[str, accounting.EpsilonReport]
  regime: triplet_lib.Regime
  scheme: SamplingScheme = POISSON
  jl_floor: float | None = None
  unavailable: dict[str, str] = dataclasses.field(default_factory=dict)

  @property
  def epsilon(self) -> accounting.EpsilonReport:
    """The scheme's default accountant's report: the one gates use.

    Raises:
      limits.AccountantLimit: that accountant cannot compute this setting.
    """
    default = self.scheme.default_accountant
    if default in self.unavailable:
      raise limits.AccountantLimit(default, self.unavailable[default])
    return self.epsilons[default]

  def eps_over_eps_tan(self, accountant: str) -> float:
    """How far the accountant is from eps_TAN: ~1 while sigma >= 2."""
    return self.epsilons[accountant].epsilon / self.eps_tan

  def as_dict(self) -> dict[str, Any]:
    t = self.triplet
    return {
        "dataset_size": t.dataset_size,
        "batch_size": t.batch_size,
        "noise_multiplier": t.noise_multiplier,
        "steps": t.steps,
        "sampling_rate": t.sampling_rate,
        "sampler": str(self.scheme.sampler),
        "adjacency": self.scheme.adjacency,
        "sampling": self.scheme.describe(t.batch_size),
        **self.scheme.bound.params(),
        "jl_floor": self.jl_floor,
        "max_batch_size": self.scheme.cap(t.batch_size),
        "epochs": t.epochs,
        "eta": t.eta,
        "eta_step": t.eta_step,
        "total_amount_of_noise": t.total_amount_of_noise,
        "delta": self.delta,
        "eps_tan": self.eps_tan,
        "epsilon": {
            name: {
                "epsilon": report.epsilon,
                "eps_over_eps_tan": self.eps_over_eps_tan(name),
                "adjacency": report.adjacency,
                "sampling": report.sampling,
            }
            for name, report in self.epsilons.items()
        },
        "unavailable": self.unavailable,
        "default_accountant": self.scheme.default_accountant,
        "regime": self.regime.value,
        "regime_explanation": self.regime.explanation,
    }


def privacy_report(
    triplet: triplet_lib.PrivacyTriplet,
    delta: float | None = None,
    accountants: tuple[str, ...] | None = None,
    scheme: SamplingScheme = POISSON,
) -> PrivacyReport:
  """Accounts `triplet` with each accountant (by default every one that
  covers `scheme`); delta defaults to 1 / N."""
  if delta is None:
    delta = accounting.default_delta(triplet.dataset_size)
  epsilons, unavailable = {}, {}
  for name in accountants or scheme.accountants:
    try:
      epsilons[name] = accounting.epsilon(triplet, delta, name, scheme)
    except limits.AccountantLimit as limit:
      unavailable[name] = limit.reason
  return PrivacyReport(
      triplet=triplet,
      delta=delta,
      eps_tan=triplet.eps_tan(delta),
      epsilons=epsilons,
      unavailable=unavailable,
      regime=triplet_lib.regime(triplet),
      scheme=scheme,
      jl_floor=scheme.bound.floor(triplet.sampling_rate,
                                  float(triplet.noise_multiplier), delta),
  )
