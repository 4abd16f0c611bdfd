"""The search: many simulated trials at the TAN-equivalent small batch.

`space.py` and `hyperparameters.py` (the search file's schema), `trials.py`
(Optuna's define-by-run space), `trial_record.py` (each trial's runs and
outcome, typed), `driver.py` and
`callbacks.py` (Ray Tune with Optuna, leaderboard), `modes.py` (each way of
tuning), `tracking.py` (MLflow parent and nested runs), `private_search.py`
(a private random search), `results.py` (leaderboard, pictures). It may
import `registry/`, `ledger/`, `release/`, `training/`, `privacy/` and the
adapters at the root (MLflow, Ray).
"""
