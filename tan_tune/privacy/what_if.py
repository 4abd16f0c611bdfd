"""The calculator's what-ifs around a reference triplet, as JSON-ready rows.

Simulations at smaller batches (TAN section 3.4), constant-eta alternatives
(table 3), the same run on a larger dataset (table 5), JL clipping at
several numbers of projections, and private random searches of the reference
run (Papernot & Steinke), for each law of the number of trials K under both
selection bounds: what `tan-tune privacy` prints beside the reference run's
own report.
"""

import dataclasses
import math
from typing import Any, Sequence

from tan_tune.errors import ConfigError
from tan_tune.privacy import accountant_registry
from tan_tune.privacy import accountants
from tan_tune.privacy import accounting
from tan_tune.privacy import clipping_bound
from tan_tune.privacy import jl_accounting
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.privacy import trial_count
from tan_tune.privacy import tuning
from tan_tune.privacy.sampling_scheme import POISSON, SamplingScheme
from tan_tune.privacy.triplet import PrivacyTriplet


def simulation_rows(reference: PrivacyTriplet,
                    simulated: list[PrivacyTriplet], delta: float,
                    scheme: SamplingScheme) -> list[dict[str, Any]]:
  """Each simulation's triplet, saving and own eps, which is no guarantee:
  Poisson RDP for exact clipping, JL's own accountant (never RDP) for JL; inf
  where it overflows or is out of an accountant's reach."""
  return [{
      "batch_size": sim.batch_size,
      "noise_multiplier": sim.noise_multiplier,
      "steps": sim.steps,
      "eta_step": sim.eta_step,
      "compute_saving": triplet_lib.compute_saving(reference, sim),
      # Exact clipping: Poisson RDP; JL: its own accountant, never RDP.
      "own_epsilon_not_a_guarantee": (
          accounting.epsilon_or_inf(sim, delta, scheme=scheme)
          if not scheme.bound.exact else
          accounting.epsilon_or_inf(sim, delta, "rdp", POISSON)),
      "private": False,
  } for sim in simulated]


def alternative_rows(
    reference: PrivacyTriplet, steps_grid: list[int],
    simulated: list[PrivacyTriplet], delta: float, accountant: str,
    scheme: SamplingScheme,
) -> list[dict[str, Any]]:
  """The constant-eta alternatives (B_ref sqrt(S_ref / S), sigma_ref, S),
  their eps and lr scale, and where each simulation would run them."""
  rows = []
  for alternative in triplet_lib.constant_eta_triplets(reference, steps_grid):
    alt = alternative.triplet
    rows.append({
        "steps": alt.steps,
        "batch_size": alt.batch_size,
        "noise_multiplier": alt.noise_multiplier,
        "lr_scale": alternative.lr_scale,
        "eta": alt.eta,
        "epsilon": accounting.epsilon(alt, delta, accountant, scheme).epsilon,
        "eps_tan": alt.eps_tan(delta),
        "simulated": [{
            "batch_size": sim.triplet.batch_size,
            "noise_multiplier": sim.triplet.noise_multiplier,
        } for sim in (triplet_lib.simulate_alternative(alternative, reference, s)
                      for s in simulated)],
    })
  return rows


def dataset_scale_rows(
    reference: PrivacyTriplet, betas: list[float], delta: float,
    accountant: str, scheme: SamplingScheme,
) -> list[dict[str, Any]]:
  """The same B, sigma and S on beta N examples, at delta / beta."""
  rows = []
  for beta in betas:
    scaled, scaled_delta = triplet_lib.scale_dataset(reference, beta, delta)
    rows.append({
        "beta": beta,
        "dataset_size": scaled.dataset_size,
        "delta": scaled_delta,
        "epsilon": accounting.epsilon(scaled, scaled_delta, accountant,
                                      scheme).epsilon,
        "eps_tan": scaled.eps_tan(scaled_delta),
    })
  return rows


def projection_rows(reference: PrivacyTriplet, delta: float,
                    projections: list[int]) -> list[dict[str, Any]]:
  """eps of JL clipping at each r, beside exact clipping on the same PLD
  grid and the floor no accountant can go below."""
  q, sigma = reference.sampling_rate, float(reference.noise_multiplier)
  exact = jl_accounting.composed_epsilon(
      ((q, sigma, reference.steps, None),), delta)
  return [{
      "jl_projections": r,
      "epsilon": accounting.epsilon(
          reference, delta, "pld-jl",
          SamplingScheme(bound=clipping_bound.JlBound(r))).epsilon,
      "floor": jl_accounting.jl_floor(q, sigma, delta, r),
      "exact_clipping_epsilon": exact,
  } for r in projections]


# The etas of the truncated negative binomial D(eta, gamma) priced for each
# mean: eta = 0 is the logarithmic law, eta = 1 the geometric; Poisson too.
SEARCH_SHAPES = (-0.5, 0.0, 0.5, 1.0, 2.0, 5.0)


def search_law(mean: float, eta: float | None) -> trial_count.TrialCount:
  """K's law of mean E[K]: D(eta, gamma), by name where it has one, or
  Poisson(mean) for eta None."""
  if eta is None:
    return trial_count.TrialCount("poisson", mean)
  names = {shape: name for name, shape in trial_count.SHAPES.items()}
  if eta in names:
    return trial_count.TrialCount(names[eta], mean)
  return trial_count.TrialCount("negative_binomial", mean, eta)


def require_search_inputs(shapes: list[float],
                          score_noise: float | None) -> None:
  """Raises ConfigError, naming the field, for an eta outside (-1, inf) or
  a score noise that is not a number > 0."""
  for eta in shapes:
    if not -1 < eta < math.inf:
      raise ConfigError("trial_shapes", eta, "a number eta > -1 (0 is the"
                        " logarithmic law, 1 the geometric)")
  if score_noise is not None and not 0 < score_noise < math.inf:
    raise ConfigError("score_noise", score_noise, "a number > 0, the"
                      " standard deviation of each trial's score")


def private_search_rows(
    reference: PrivacyTriplet, delta: float, mean_trials: list[float],
    target_epsilon: float | None, score_noise: float | None = None,
    shapes: Sequence[float] = SEARCH_SHAPES,
) -> list[dict[str, Any]]:
  """What a private random search of the reference run costs, by mean
  number of trials E[K] and law of K (D(eta, gamma) at each of `shapes`,
  and Poisson): the whole search's eps under both selection bounds and the
  smaller, which it reports; for a target, the sigma each trial may run at
  and what one trial alone then spends (its room), and the law giving the
  most; beside every trial released (plain composition).

  score_noise: the standard deviation of the Gaussian on each trial's count
  of correct validation predictions; None: trials scored on public data.
  """
  shapes = list(shapes)
  require_search_inputs(shapes, score_noise)
  etas = [*sorted(set(shapes)), None]
  rows = []
  for mean in mean_trials:
    searches = [_search_row(reference, delta, search_law(mean, eta),
                            target_epsilon, score_noise) for eta in etas]
    reachable = [s for s in searches if s["sigma_for_target"] is not None]
    rows.append({
        "mean_trials": mean,
        "score_noise": score_noise,
        "one_run_epsilon": tuning.composed_runs_epsilon(reference, delta, 1),
        "all_released_epsilon": tuning.composed_runs_epsilon(
            reference, delta, round(mean)),
        "searches": searches,
        # The smallest sigma: the largest eps one trial alone may spend.
        "most_room": (min(reachable, key=lambda s: s["sigma_for_target"])
                      if reachable else None),
    })
  return rows


def _search_row(reference: PrivacyTriplet, delta: float,
                count: trial_count.TrialCount, target_epsilon: float | None,
                score_noise: float | None) -> dict[str, Any]:
  search = tuning.search_event(reference, count, score_noise)
  bounds = {name: accountant_registry.named(name).epsilon([search], delta)
            for name in accountants.SELECTION_BOUNDS}
  # What tuning.search_epsilon reports: the smaller, RDP's on a tie.
  reported = min(accountants.SELECTION_BOUNDS, key=bounds.__getitem__)
  sigma = room = None
  if target_epsilon is not None:
    try:
      sigma = tuning.calibrate_search_sigma(target_epsilon, reference, delta,
                                            count, score_noise)
    except ConfigError as error:
      if error.field != "target epsilon":
        raise
    if sigma is not None:
      room = accounting.epsilon(
          dataclasses.replace(reference, noise_multiplier=sigma),
          delta).epsilon
  return {
      "distribution": count.distribution,
      "eta": None if count.eta == math.inf else count.eta,
      "rdp_epsilon": bounds[accountants.SELECTION_BOUNDS[0]],
      "profile_epsilon": bounds[accountants.SELECTION_BOUNDS[1]],
      "epsilon": bounds[reported],
      "accountant": reported,
      "sigma_for_target": sigma,
      "trial_epsilon": room,
  }
