"""Privacy maths, the bottom of the pipeline: triplets, accountants, reports.

`triplet.py` (eta, eps_TAN, simulation at a smaller batch),
`sampling_scheme.py` (sampler and adjacency), `accounting.py` (epsilons,
calibration, composition) over `mechanisms.py` (RDP curves and PLDs by
scheme), `sampled_gaussian.py` (Poisson's RDP, exact at every order) and
`fixed_size.py` (Birrell et al.'s fixed-size bounds),
`comparison.py` (one triplet under every sampler), `report.py` (everything
said about one triplet) and `plots.py` (the privacy wall). It imports nothing
of tan_tune but `errors` and `config_io`.
"""
