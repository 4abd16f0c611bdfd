"""Private runs: what every run that prints an epsilon goes through.

A promotion, a private random search, `tan-tune train` of a private config
and a private audit each publish an epsilon as a guarantee, so each is
charged to the privacy ledger and runs inside the same boundary:
`ledger.py` (every private run charged to its dataset; `composition.py`,
what a dataset's entries compose to;
`ledger_key.py`, the secret key its dataset identities are keyed with;
`custody.py`, one charge for one run in one place: sealed checkpoints,
bound to one configuration and one folder),
`boundary.py` (the charge before anything trains, owner-only files, a
private Ray folder, temp folders cleared on every node), `release.py` (the
one way out of a private run: an allow-list per kind of MLflow run, every
record dated at the run's start), `mlflow_store.py` (the MLflow store every
run writes to: its URI, tags, experiments), `ray_cluster.py` (an embedded or
existing Ray) and `private_train.py` (`tan-tune train` of a private config,
charged like any run). It may import `training/` and `privacy/`; `search/`,
`promote/` and the stages above import it.
"""
