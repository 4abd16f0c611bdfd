"""The privacy ledger: every private run charged to its dataset's budget.

`ledger.py` (the entries of one MLflow store, read in order and reserved),
`ledger_entry.py` (one entry), `ledger_key.py` (the secret key its dataset
identities are keyed with), `ledger_seal.py` (each entry's MAC),
`ledger_order.py` (the order the store gives charges made at once),
`composition.py` (what a dataset's entries compose to), `charge.py` (the
charge every private run makes before it trains) and `custody.py` (one
charge for one run in one place: sealed checkpoints, bound to one
configuration and one folder). It may import `release/` and the stages
below it.
"""
