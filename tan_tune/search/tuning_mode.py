"""How a search file says its search is accounted, and what each mode allows.

`tuning_privacy` (`privacy/tuning.py` has the maths):

* `non_private` (default): TAN's practice. Trials simulate the reference run
  on the private data at a small batch; the search is not accounted.
* `public_data`: trials run on `public_dataset`, declared public and other
  than the private `dataset`, which N, the budget and `promote` use. The
  promoted run's eps is then the end-to-end eps.
* `private_random_search`: every trial is a private run at the reference
  triplet (`simulation_batch_sizes: [B_ref]`), with sampling and noise drawn
  from the OS's secret source; hyper-parameters are drawn independently
  (`sampler: random`; TPE adapts to earlier trials, and ASHA stops trials on
  others' results, which Papernot & Steinke do not cover); the number of
  trials K ~ `trial_count` is drawn before the search, secretly; trials are
  scored on the held-out test split (`select_on: test`: public data, as the
  promoted run's test accuracy is); only the best is released. The search's
  eps must fit `reference.target_epsilon`, and it is charged to the ledger.
"""

from tan_tune.errors import ConfigError
from tan_tune.privacy import tuning
from tan_tune.search.hyperparameters import check
from tan_tune.training import datasets

SEARCH_ALGORITHMS = ("tpe", "random")


def check_mode(space) -> None:
  """Raises ConfigError for a field the space's `tuning_privacy` forbids."""
  mode = tuning.require_tuning_privacy(space.tuning_privacy)
  check(space.search_algorithm in SEARCH_ALGORITHMS, "sampler",
        space.search_algorithm, f"one of {list(SEARCH_ALGORITHMS)}")
  if mode == tuning.PUBLIC_DATA:
    check(space.public_dataset is not None, "public_dataset", None,
          "required with tuning_privacy public_data: the public data the"
          " trials run on")
    check(space.public_dataset != space.dataset, "public_dataset",
          space.public_dataset.title,
          "a dataset other than the private `dataset` the search promotes"
          " on: searching the private data is not public_data")
  else:
    check(space.public_dataset is None, "public_dataset",
          getattr(space.public_dataset, "name", None),
          "only with tuning_privacy public_data")
  if mode != tuning.PRIVATE_RANDOM_SEARCH:
    check(space.trial_count is None, "trial_count", space.trial_count,
          "only with tuning_privacy private_random_search (num_trials counts"
          " the others)")
    return
  _check_private_random_search(space)


def _check_private_random_search(space) -> None:
  why = "in a private random search"
  check(space.trial_count is not None, "trial_count", None,
        "required with tuning_privacy private_random_search: e.g."
        " {distribution: logarithmic, mean: 10}")
  check(space.search_algorithm == "random", "sampler",
        space.search_algorithm,
        f"'random' {why}: Papernot & Steinke cover hyper-parameters drawn"
        " independently of earlier trials, which TPE is not")
  check(space.scheduler == "fifo", "scheduler", space.scheduler,
        f"'fifo' {why}: ASHA stops trials on other trials' results, which"
        " the accounting does not cover")
  check(space.steps_grid is None, "steps_grid", space.steps_grid,
        f"unset {why}: every trial runs the reference triplet")
  check(tuple(space.simulation_batch_sizes) == (space.reference.batch_size,),
        "simulation_batch_sizes", list(space.simulation_batch_sizes),
        f"[{space.reference.batch_size}] (B_ref) {why}: every trial is a"
        " private run at the reference triplet")
  check(space.select_on == "test", "select_on", space.select_on,
        f"'test' {why}: trials are scored on the held-out test split, public"
        " as the promoted run's test accuracy is (a DP score on private"
        " validation data is not offered yet)")
  check(space.reference.target_epsilon is not None, "reference.target_epsilon",
        None, f"required {why}: the budget the whole search must fit")
  try:
    for scheme in space.reference_schemes():
      tuning.require_search_scheme(scheme)
  except ConfigError as error:
    raise ConfigError("reference.sampling", space.reference.sampling,
                      error.allowed) from None


def check_public_dataset(space, private, public) -> None:
  """public_data, once both datasets are loaded: other examples than the
  private data's (paths and names can differ for the same data), and
  enough of them for every trial's batch."""
  check(datasets.examples(public) != datasets.examples(private),
        "public_dataset", space.public_dataset.title,
        f"other examples than the private dataset {space.dataset.title}'s:"
        " these are the same data")
  largest = max(space.simulation_batch_sizes)
  check(largest <= public.num_train, "simulation_batch_sizes", largest,
        f"at most the public dataset's N = {public.num_train}")
