"""The calculator's what-ifs around a reference triplet, as JSON-ready rows.

Simulations at smaller batches (TAN section 3.4), constant-eta alternatives
(table 3), the same run on a larger dataset (table 5), JL clipping at
several numbers of projections, and private random searches of the reference
run (Papernot & Steinke): what `tan-tune privacy` prints beside the
reference run's own report.
"""

from typing import Any

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


def private_search_rows(reference: PrivacyTriplet, delta: float,
                        mean_trials: list[float],
                        target_epsilon: float | None) -> list[dict[str, Any]]:
  """What a private random search of the reference run costs, by mean number
  of trials and distribution: the whole search's eps and, for a target, the
  sigma each trial needs; beside every trial released (plain composition)."""
  rows = []
  for mean in mean_trials:
    searches = []
    for distribution in ("logarithmic", "geometric", "poisson"):
      count = trial_count.TrialCount(distribution, mean)
      searches.append({
          "distribution": distribution,
          "epsilon": tuning.search_epsilon(reference, delta, count).epsilon,
          "sigma_for_target": (tuning.calibrate_search_sigma(
              target_epsilon, reference, delta, count)
                               if target_epsilon else None),
      })
    rows.append({
        "mean_trials": mean,
        "accountant": tuning.ACCOUNTANT,
        "one_run_epsilon": tuning.composed_runs_epsilon(reference, delta, 1),
        "all_released_epsilon": tuning.composed_runs_epsilon(
            reference, delta, round(mean)),
        "searches": searches,
    })
  return rows
