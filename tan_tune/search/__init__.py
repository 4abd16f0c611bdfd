"""The search: many simulated trials at the TAN-equivalent small batch.

`space.py` and `hyperparameters.py` (the search file's schema), `trials.py`
(Optuna's define-by-run space, each trial's config), `driver.py` and
`callbacks.py` (Ray Tune with Optuna, leaderboard), `tracking.py` (MLflow
parent and nested runs), `ray_cluster.py` (embedded or existing Ray). It may
import `training/` and `privacy/`.
"""
