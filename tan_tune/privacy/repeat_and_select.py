"""Papernot & Steinke's Renyi DP of a private selection (ICLR 2022).

The mechanism: draw K ~ D (`trial_count.py`), run a base mechanism Q K
times, release only the best output. If Q is (lambda, eps(lambda))-RDP at
every order, the selection is, at each order lambda > 1:

* D a truncated negative binomial (eta > -1, gamma; theorem 2), for every
  free order lambda_hat >= 1, with eps_hat = eps(lambda_hat):

    eps'(lambda) = eps(lambda) + (1 + eta) (1 - 1/lambda_hat) eps_hat
                   + (1 + eta) log(1/gamma) / lambda_hat
                   + log E[K] / (lambda - 1),

  of which the smallest over lambda_hat among the orders is taken;
* D = Poisson(mu) (theorem 6), with delta_hat the delta of Q at
  eps_hat = log(1 + 1/(lambda - 1)):

    eps'(lambda) = eps(lambda) + mu delta_hat + log(mu) / (lambda - 1).

RDP at a lower order never exceeds that at a higher one, so each order also
takes the smallest bound of the orders above it. dp_accounting implements
both for eta >= 0; the truncated negative binomial is written here for every
eta > -1 (tests check it against dp_accounting's where both apply, and
against autodp's), the Poisson case is dp_accounting's.
"""

import math

from dp_accounting.rdp import rdp_privacy_accountant
import numpy as np

from tan_tune.privacy.trial_count import TrialCount


def selection_rdp(orders: np.ndarray, base: np.ndarray,
                  count: TrialCount) -> np.ndarray:
  """The RDP at `orders` (any order) of the best of K ~ `count` runs of a
  mechanism whose RDP at `orders` is `base`; an order <= 1 takes the bound
  of the orders above it (inf if none)."""
  orders, base = np.asarray(orders, float), np.asarray(base, float)
  if count.eta == math.inf:
    return np.asarray(rdp_privacy_accountant._compute_rdp_repeat_and_select(  # pylint: disable=protected-access
        list(orders), list(base), count.mean, math.inf))
  eta, gamma = count.eta, count.gamma()
  with np.errstate(invalid="ignore", divide="ignore"):
    # The free order lambda_hat >= 1 (an order below 1 would lower the
    # bound unsoundly); eps_hat = inf at lambda_hat = 1 gives nan: no bound.
    hat = orders >= 1
    terms = (1 - 1 / orders[hat]) * base[hat] - math.log(gamma) / orders[hat]
    free = (1 + eta) * np.min(np.where(np.isnan(terms), np.inf, terms),
                              initial=np.inf)
    bound = np.where(orders > 1,
                     base + math.log(count.mean) / (orders - 1) + free,
                     np.inf)
  # Monotone in the order: the best bound at this order or any above it.
  return np.array([np.min(bound[orders >= order]) for order in orders])
