"""Privacy maths, the bottom of the pipeline: triplets, accountants, reports.

`triplet.py` (eta, eps_TAN, simulation at a smaller batch), `samplers.py`
(the registered DP samplers: their draws and their mechanisms),
`sampling_scheme.py` (sampler and adjacency), `accountant_registry.py` (the
registered accountants and what each covers) with `run_accountants.py` and
`accountants.py` (events, composition), `accounting.py` (epsilons,
calibration) over `mechanisms.py` (RDP curves by mechanism),
`sampled_gaussian.py` (Poisson's RDP, exact at every order) and
`fixed_size.py` (Birrell et al.'s fixed-size bounds),
`comparison.py` (one triplet under every sampler), `report.py` (everything
said about one triplet) and `plots.py` (the privacy wall). It imports nothing
of tan_tune but `errors` and `config_io`.
"""
