"""Promotion: the search's winner as one private, full-budget reference run.

`plan.py` (the reference config, estimates), `gate.py` (the privacy gate),
`run.py` (calibration, the ledger's charge, Ray Train, the promoted MLflow
run), `worker.py` (what runs on Ray workers), `scaling_law.py` (accuracy
against B). It may import `search/`, `private_runs/`, `training/` and
`privacy/`.
"""
