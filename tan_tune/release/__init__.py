"""The release path: the one way out of a private run.

A promotion, a private random search, `tan-tune train` of a private config
and a private audit each publish an epsilon as a guarantee, so each runs
inside the same boundary and publishes through the same gate:
`boundary.py` (owner-only files, a private Ray folder, temp folders cleared
on every node), `exposure.py` (who else can reach a path), `release.py` (an
allow-list per kind of MLflow run, every record dated at the run's start)
and `release_time.py` (a release at a time fixed in advance). It may import
`training/`, `privacy/` and the adapters at the root (`mlflow_store.py`,
`ray_cluster.py`).
"""
