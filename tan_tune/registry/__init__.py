"""The released model: a private run's weights leave with their guarantee.

`served_model.py` (the headline weights as an MLflow Model, loadable
without tan_tune; `pyfunc_program.py` and `pyfunc_factory.py` are the
loaders it copies in by path), `privacy_card.py` (the guarantee, read back
from what the run published) and `model_registry.py` (registered versions
with their card, aliases, the champion within an eps limit). It may import
`ledger/`, `release/` and the stages below it.
"""
