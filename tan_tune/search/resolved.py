"""A search file resolved once against its data: what every stage reads.

`resolve` takes a validated search file (`space.py`) and the size of its
private dataset, checks what needs it, and fixes, once, everything that
depends on the data:

    N = |training set|,   delta = reference.delta or 1 / N,
    reference triplet (N, B_ref, sigma_ref, S_ref),   q_ref = B_ref / N,

and, for a search its strategy accounts (a private random search), the eps
of the whole search (`strategy.py`). Nothing computed from the examples is kept: the
ledger keys the dataset from its data when a run is charged
(`ledger.Ledger.identity`). The result is immutable
and saved in the search directory (`search_files.RESOLVED_FILE`, beside the
search file's copy, and both among its MLflow artifacts); a resumed search,
its trials, its callbacks, its results, `promote` and the calibration runs
read it back instead of resolving the file again, so they all see the search
as it started, whatever became of the file or the data since.
"""

import dataclasses
import json
import pathlib
from typing import Any

from tan_tune.errors import ConfigError
from tan_tune.privacy import accounting
from tan_tune.privacy import limits
from tan_tune.privacy import sampling_scheme
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.search import search_files
from tan_tune.search import space as space_lib
from tan_tune.search import tuning_mode
from tan_tune.search.hyperparameters import check


@dataclasses.dataclass(frozen=True)
class ResolvedSearch:
  """One search, resolved against its data.

  Attributes:
    space: the search file as the search started.
    reference: (N, B_ref, sigma_ref, S_ref), the run the search predicts.
    delta: the reference run's delta: reference.delta, or 1 / N.
    search_epsilon: a private random search's eps for the whole search;
      None for the other modes, whose search is not accounted.
  """

  space: space_lib.SearchSpace
  reference: triplet_lib.PrivacyTriplet
  delta: float
  search_epsilon: accounting.EpsilonReport | None = None

  @property
  def dataset_size(self) -> int:
    """N: the private training set's size."""
    return self.reference.dataset_size

  @property
  def scheme(self) -> sampling_scheme.SamplingScheme:
    """The reference run's scheme that spends the most (`reference_schemes`)."""
    return self.space.reference_schemes()[0]

  def facts(self) -> dict[str, Any]:
    """What was resolved, JSON-ready (the space is its own file)."""
    return {
        "reference": dataclasses.asdict(self.reference),
        "delta": self.delta,
        "search_epsilon": (dataclasses.asdict(self.search_epsilon)
                           if self.search_epsilon else None),
    }


def resolve(space: space_lib.SearchSpace,
            dataset_size: int) -> ResolvedSearch:
  """Checks the file against its data's size N and fixes what depends on it.

  The checks that need N: B_ref <= N, delta <= 1/N, every S of steps_grid
  at constant eta (B_ref sqrt(S_ref / S) <= N), and the budget. A private
  random search's budget is checked for the whole search
  (`privacy/tuning.py`); any other's for the reference run, with the
  sampling scheme's default accountant (RDP, the paper's, for Poisson: the
  loosest of its accountants, so a reference within it is within it for
  all; `pld-jl` at every r of JL clipping).

  Args:
    space: a validated search file.
    dataset_size: N, the private training set's size.

  Raises:
    ConfigError: naming the field that does not fit the data.
  """
  reference = space.reference
  check(reference.batch_size <= dataset_size, "reference.batch_size",
        reference.batch_size,
        f"at most the training-set size N = {dataset_size} of"
        f" {space.dataset.title}")
  triplet = triplet_lib.PrivacyTriplet(dataset_size, reference.batch_size,
                                       reference.noise_multiplier,
                                       reference.steps)
  triplet_lib.require_private_delta("reference.delta", reference.delta,
                                    dataset_size)
  if space.steps_grid:
    # Raises when an S needs B_ref sqrt(S_ref / S) > N.
    triplet_lib.constant_eta_triplets(triplet, space.steps_grid)
  delta = accounting.delta_or_default(reference.delta, dataset_size)
  resolved = ResolvedSearch(
      space, triplet, delta,
      tuning_mode.named(space.tuning_privacy).search_epsilon(
          space, triplet, delta))
  if reference.target_epsilon is not None:
    _check_budget(resolved, reference.target_epsilon)
  return resolved


def _check_budget(resolved: ResolvedSearch, target: float) -> None:
  space = resolved.space
  if resolved.search_epsilon is not None:
    check(resolved.search_epsilon.epsilon <= target,
          "reference.target_epsilon", target,
          f"at least the private search's {resolved.search_epsilon.describe()};"
          " raise reference.noise_multiplier (`tan-tune privacy"
          f" --private-search {space.trial_count.mean:g} --target-epsilon`"
          " calibrates it)")
    return
  # Every candidate reference a trial may stand for, accounted exactly: at
  # constant eta its eps is the reference's only while sigma > 2 (TAN).
  candidates = [alternative.triplet for alternative in
                triplet_lib.constant_eta_triplets(
                    resolved.reference, space.proposed_steps() or ())]
  for scheme in space.reference_schemes():
    calibrate = ("`tan-tune privacy --target-epsilon --sampling"
                 f" {space.reference.sampling}{scheme.bound.cli_flags()}`"
                 " calibrates it")
    spent = _epsilon(resolved, resolved.reference, scheme)
    check(spent.epsilon <= target, "reference.target_epsilon", target,
          f"at least the reference run's {spent.describe()}; raise"
          f" reference.noise_multiplier ({calibrate})")
    for triplet in candidates:
      spent = _epsilon(resolved, triplet, scheme)
      check(spent.epsilon <= target, "steps_grid", triplet.steps,
            f"a candidate within the target eps = {target}; at constant eta"
            f" (B = {triplet.batch_size}, S = {triplet.steps}) it spends"
            f" {spent.describe()}; drop it, or raise"
            f" reference.noise_multiplier ({calibrate})")


def _epsilon(resolved: ResolvedSearch, triplet: triplet_lib.PrivacyTriplet,
             scheme) -> accounting.EpsilonReport:
  try:
    return accounting.epsilon(triplet, resolved.delta, scheme=scheme)
  except limits.AccountantLimit as limit:
    raise ConfigError("reference.noise_multiplier",
                      resolved.space.reference.noise_multiplier,
                      str(limit)) from None


def save(resolved: ResolvedSearch, directory: pathlib.Path) -> pathlib.Path:
  """Writes what was resolved into the search directory, beside the search
  file's copy (`search_files.SPACE_FILE`, written by the driver); returns
  the file."""
  path = directory / search_files.RESOLVED_FILE
  path.write_text(json.dumps(resolved.facts(), indent=2))
  return path


def load(directory: pathlib.Path) -> ResolvedSearch:
  """Reads back what `save` wrote and the search file's copy beside it (in
  a search directory, or downloaded from the search's MLflow run)."""
  directory = pathlib.Path(directory)
  facts = json.loads((directory / search_files.RESOLVED_FILE).read_text())
  return ResolvedSearch(
      space=space_lib.load_search_space(directory / search_files.SPACE_FILE),
      reference=triplet_lib.PrivacyTriplet(**facts["reference"]),
      delta=facts["delta"],
      search_epsilon=(accounting.EpsilonReport(**facts["search_epsilon"])
                      if facts["search_epsilon"] else None),
  )
