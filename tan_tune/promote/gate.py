"""The privacy gate: a promotion's reference run against its budget.

It runs before anything starts. With the default accountant of the search
file's sampling scheme (RDP for Poisson sampling at q = B_ref / N and
add/remove-one adjacency, PLD for truncated Poisson, Birrell et al.'s RDP
for fixed-size batches, JL's PLD mixture for JL clipping):

    refuse  if  eps(N, B_ref, sigma_ref, S; delta) > target (or is infinite),
    refuse  if  sigma_ref < 2,

the latter because below sigma = 2 epsilon is no longer a function of
eta = q sqrt(S) / (sqrt(2) sigma) alone (TAN section 3.2), so the simulated
trials say little about this run. Then the privacy ledger (`ledger.py`):
what the same dataset has already spent, composed with this run, must stay
within the dataset's budget, whichever search spent it. The budget comes from
the search file; a flag may tighten it, never loosen it.
"""

import dataclasses
import math

from tan_tune.errors import ConfigError
from tan_tune.ledger import composition as composition_lib
from tan_tune.privacy import accounting
from tan_tune.privacy import limits
from tan_tune.privacy import report as privacy_report_lib
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.privacy.sampling_scheme import SamplingScheme
from tan_tune.search import space as search_space_lib

# Below it, epsilon depends on more than eta: TAN's simulation stops holding.
MIN_NOISE_MULTIPLIER = 2.0


class PromotionRefused(Exception):
  """The reference run would break the privacy budget, or was already run."""


def check_budget(
    triplet: triplet_lib.PrivacyTriplet, delta: float, target: float | None,
    scheme: SamplingScheme,
) -> float:
  """The gate: the reference run's eps, or PromotionRefused.

  Returns:
    eps with the scheme's default accountant.
  """
  if target is None:
    raise PromotionRefused(
        "no privacy budget: set reference.target_epsilon in the search file"
        " or pass --target-epsilon; promote never runs without one")
  if triplet.noise_multiplier < MIN_NOISE_MULTIPLIER:
    raise PromotionRefused(
        f"sigma_ref = {triplet.noise_multiplier:g} < {MIN_NOISE_MULTIPLIER:g}:"
        " below it epsilon depends on more than eta, so the simulated trials"
        " do not predict this run (TAN section 3.2); raise"
        " reference.noise_multiplier and B_ref together, at the same eta")
  try:
    spent = accounting.epsilon(triplet, delta, scheme=scheme)
  except limits.AccountantLimit as limit:
    raise PromotionRefused(f"{limit}; nothing was run") from None
  if math.isinf(spent.epsilon):
    raise PromotionRefused(
        f"{scheme.bound.infinite_epsilon_reason()}; nothing was run")
  if spent.epsilon > target:
    raise PromotionRefused(
        f"the reference run would spend eps = {spent.epsilon:.4f} >"
        f" target {target:g} ({spent.describe()}); nothing was run")
  return spent.epsilon


def target_epsilon(
    space: search_space_lib.SearchSpace, override: float | None
) -> float | None:
  """The budget: the file's target, or a tighter one from the command line.

  Raises:
    ConfigError: `override` is looser than the file's target.
  """
  declared = space.reference.target_epsilon
  if override is None:
    return declared
  if not override > 0:
    raise ConfigError("--target-epsilon", override, "a number > 0")
  if declared is not None and override > declared:
    raise ConfigError(
        "--target-epsilon", override,
        f"at most the search file's reference.target_epsilon = {declared:g};"
        " a flag may tighten the budget, never loosen it")
  return override


def check_ledger(composition: composition_lib.Composition, dataset: str) -> None:
  """Refuses a run that would take its dataset past its budget."""
  if not composition.within_budget:
    raise PromotionRefused(composition_lib.over_budget(composition, dataset))


def check_spent(planned: triplet_lib.PrivacyTriplet, delta: float,
                scheme: SamplingScheme, target: float,
                steps: int) -> privacy_report_lib.PrivacyReport:
  """The run's epsilons at the steps it took; the gate's bound must hold.

  Raises:
    RuntimeError: it took other than the planned S, or spent over `target`.
  """
  report = privacy_report_lib.privacy_report(
      dataclasses.replace(planned, steps=steps), delta, scheme=scheme)
  value = report.epsilon.epsilon
  if steps != planned.steps or value > target:
    raise RuntimeError(
        f"the run took {steps} steps for eps = {value:.4f}; the plan was"
        f" {planned.steps} steps within {target:g}")
  return report
