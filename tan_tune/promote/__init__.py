"""Promotion: the search's winner as one private, full-budget reference run.

`plan.py` (the reference config, estimates), `gate.py` (the privacy gate),
`ledger.py` (every private run charged to its dataset), `run.py` (calibration,
Ray Train, the promoted MLflow run), `worker.py` (what runs on Ray workers),
`scaling_law.py` (accuracy against B). It may import `search/`,
`training/` and `privacy/`.
"""
