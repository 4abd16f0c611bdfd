"""The privacy calculator as Python functions: `tan-tune privacy`'s maths.

`privacy` is one triplet's report; `calculate` is everything the command
shows about a reference run (its report, a calibrated sigma, the samplers
side by side, JL clipping by projections, simulations, constant-eta
alternatives, larger datasets, private random searches) as a JSON-ready
dict. They import nothing of tan_tune but `privacy/`: neither Ray, MLflow
nor the trainer (`figures.py` draws the privacy wall).
"""

from typing import Any, Sequence

from tan_tune.api import choices
from tan_tune.api.choices import Clipping, DpSampler
from tan_tune.errors import ConfigError
from tan_tune.privacy import accounting
from tan_tune.privacy import clipping_bound
from tan_tune.privacy import comparison
from tan_tune.privacy import report as report_lib
from tan_tune.privacy import sampling_scheme
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.privacy import tuning
from tan_tune.privacy import what_if
# Re-exported as the API's own, so that its reference renders the class.
from tan_tune.privacy.report import PrivacyReport

# The etas of K's truncated negative binomial a private search is priced at.
SEARCH_SHAPES = what_if.SEARCH_SHAPES


def privacy(dataset_size: int, batch_size: int, noise_multiplier: float,
            steps: int, *, delta: float | None = None,
            sampling: str = "poisson",
            accountants: tuple[str, ...] | None = None) -> PrivacyReport:
  """Epsilon of the triplet (N, B, sigma, S) from every accountant of the
  sampler (or those named), at q = B / N.

  Args:
    dataset_size: N, the training set's examples.
    batch_size: B, the batch size (its mean under Poisson sampling).
    noise_multiplier: sigma, the noise's standard deviation over the
      clipping norm.
    steps: S, the optimizer steps.
    delta: defaults to 1 / N.
    sampling: the sampler's spelling (`sampler_names`).
    accountants: the accountants' names (`accountant_names`); None: every
      one that covers the sampler.

  Raises:
    ConfigError: an invalid triplet, delta or sampler.
  """
  scheme = sampling_scheme.SamplingScheme(sampling)
  triplet = triplet_lib.PrivacyTriplet(dataset_size, batch_size,
                                       noise_multiplier, steps)
  return report_lib.privacy_report(triplet, delta, accountants, scheme=scheme)


def calculate(dataset_size: int, batch_size: int,
              noise_multiplier: float | None, steps: int, *,
              delta: float | None = None, accountant: str | None = None,
              sampling: Sequence[DpSampler | str] = (
                  choices.DEFAULT_SAMPLER,),
              jl_projections: Sequence[int] = (),
              simulate_batch_sizes: Sequence[int] = (),
              target_epsilon: float | None = None,
              steps_grid: Sequence[int] = (),
              dataset_scales: Sequence[float] = (),
              private_search: Sequence[float] = (),
              score_noise: float | None = None,
              trial_shapes: Sequence[float] | None = None,
              ) -> dict[str, Any]:
  """Everything `tan-tune privacy` shows, as a JSON-ready dict.

  Args:
    dataset_size: N of the reference run.
    batch_size: B of the reference run.
    noise_multiplier: its sigma; None for the one `target_epsilon` calls
      for.
    steps: S of the reference run.
    delta: defaults to 1 / N.
    accountant: for the calibration and the what-ifs; defaults to the
      first sampler's (RDP for Poisson).
    sampling: the reference run's sampler first; several are compared
      side by side (key `samplers`).
    jl_projections: JL clipping, its r first: eps for each (key `jl`).
    simulate_batch_sizes: simulations at sigma_ref B / B_ref, same S.
    target_epsilon: calibrate sigma to spend at most this (key
      `calibration`).
    steps_grid: constant-eta alternatives at fixed sigma.
    dataset_scales: the same B, sigma, S on beta N examples (delta / beta).
    private_search: mean numbers of trials E[K] of private random searches
      of the reference run (Poisson, exact clipping), each priced for K ~
      D(eta, gamma) at every eta of `trial_shapes` and K ~ Poisson, under
      both selection bounds (key `private_search`; with `target_epsilon`,
      each row's `most_room` is the law whose trials may run at the
      smallest sigma).
    score_noise: with `private_search`, the standard deviation of the
      Gaussian on each trial's count of correct validation predictions;
      None: trials scored on public data.
    trial_shapes: with `private_search`, the etas > -1 of K's truncated
      negative binomial (0 the logarithmic law, 1 the geometric); None:
      SEARCH_SHAPES.

  Raises:
    ConfigError: naming the field at fault.
    AccountantLimit: the accountant asked for cannot compute this setting.
  """
  samplers = tuple(choices.parse_sampler(sampler) for sampler in sampling)
  trial_shapes = list(SEARCH_SHAPES if trial_shapes is None
                      else trial_shapes)
  what_if.require_search_inputs(trial_shapes, score_noise)
  if score_noise is not None and not private_search:
    raise ConfigError("score_noise", score_noise,
                      "only with private_search: the noise of its scores")
  delta = accounting.delta_or_default(delta, dataset_size)
  result: dict[str, Any] = {}
  sigma = noise_multiplier
  bound = clipping_bound.from_projections(
      jl_projections[0] if jl_projections else None)
  scheme = sampling_scheme.SamplingScheme(samplers[0], bound=bound)
  accountant = accountant or scheme.default_accountant
  scheme.require_accountant(accountant)
  if target_epsilon is not None:
    calibrated = accounting.calibrate_sigma(
        dataset_size, batch_size, steps, target_epsilon, delta, accountant,
        scheme)
    result["calibration"] = {
        "target_epsilon": target_epsilon,
        "accountant": accountant,
        "sampler": str(scheme.sampler),
        "noise_multiplier": calibrated,
    }
    sigma = sigma if sigma is not None else calibrated
  reference = triplet_lib.PrivacyTriplet(dataset_size, batch_size, sigma,
                                         steps)
  result["reference"] = report_lib.privacy_report(
      reference, delta, scheme=scheme).as_dict()
  if len(samplers) > 1:
    result["samplers"] = [row.as_dict() for row in comparison.compare_samplers(
        reference, delta, samplers, target_epsilon)]
  if jl_projections:
    result["jl"] = what_if.projection_rows(reference, delta,
                                           list(jl_projections))
  simulated = [triplet_lib.simulate(reference, size)
               for size in simulate_batch_sizes]
  result["simulations"] = what_if.simulation_rows(reference, simulated, delta,
                                                  scheme)
  if steps_grid:
    result["alternatives"] = what_if.alternative_rows(
        reference, list(steps_grid), simulated, delta, accountant, scheme)
  if private_search:
    result["private_search"] = what_if.private_search_rows(
        reference, delta, list(private_search), target_epsilon, score_noise,
        trial_shapes)
  if dataset_scales:
    result["dataset_scales"] = what_if.dataset_scale_rows(
        reference, list(dataset_scales), delta, accountant, scheme)
  return result


def private_search_accounted(sampler: DpSampler | str,
                             clipping: Clipping) -> bool:
  """Whether `calculate` prices a private random search of a reference run
  drawn by `sampler` and clipped by `clipping`: Poisson add/remove-one with
  exact clipping, the events dp_accounting's RDP accountant knows
  (`tuning.require_search_scheme`).

  Args:
    sampler: the reference run's sampler, or its spelling.
    clipping: how the reference run takes per-example norms.
  """
  if clipping.projected:
    return False
  try:
    tuning.require_search_scheme(sampling_scheme.SamplingScheme(sampler))
  except ConfigError:
    return False
  return True
