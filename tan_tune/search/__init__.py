"""The search: many simulated trials at the TAN-equivalent small batch.

`space.py` and `hyperparameters.py` (the search file's schema), `trials.py`
(Optuna's define-by-run space), `trial_record.py` (each trial's runs and
outcome, typed), `driver.py` and `callbacks.py` (Ray Tune with Optuna,
leaderboard), `strategy.py` and `tuning_mode.py` (a way of tuning, and
their registry by `tuning_privacy`), `modes.py` (the built-in ways),
`search_algorithms.py` and `schedulers.py` (Optuna's samplers and Tune's
schedulers by name), `tracking.py` (MLflow parent and nested runs),
`private_search.py` (a private random search), `results.py` (leaderboard,
pictures). It may import `registry/`, `ledger/`, `release/`, `training/`,
`privacy/` and the adapters at the root (MLflow, Ray).
"""

# The built-in tuning strategies register themselves, before any search
# file is read.
from tan_tune.search import modes  # pylint: disable=unused-import
