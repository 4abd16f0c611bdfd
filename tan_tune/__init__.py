"""tan_tune: DP-SGD hyper-parameter search at the TAN-equivalent small batch.

Search cheaply at a small batch B with sigma = sigma_ref * B / B_ref and the same
number of steps S (Sander et al., "TAN Without a Burn", ICML 2023), then promote
the winner to the reference triplet (B_ref, sigma_ref, S) for one private run.
"""

__version__ = "0.1.0"
