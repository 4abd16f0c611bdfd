"""Promotion: the search's winner as one private, full-budget reference run.

`plan.py` (the reference config, estimates), `gate.py` (the privacy gate),
`run.py` (calibration, the ledger's charge, Ray Train, the promoted MLflow
run), `private_train.py` (one private run of a given config, charged and in
custody like a promotion: `tan-tune train`, a private audit's runs),
`worker.py` (what runs on Ray workers), `scaling_law.py` (accuracy against
B). It may import `search/` and every stage below it.
"""
