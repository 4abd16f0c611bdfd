"""Privacy maths, the bottom of the pipeline: triplets, accountants, reports.

`triplet.py` (eta, eps_TAN, simulation at a smaller batch), `accounting.py`
(RDP, PRV and PLD epsilons, calibration, composition), `report.py` (everything
said about one triplet) and `plots.py` (the privacy wall). It imports nothing
of tan_tune but `errors` and `config_io`.
"""
