"""What the numerical accountants can compute, and the error when they can't.

PRV and PLD accountants discretise the privacy loss on a grid. At extreme
but valid settings (sigma far below 1 over a million steps, say) the grid
would need billions of points: tens of GiB and hours. Each accountant checks
its grid's size first and, past MAX_GRID_POINTS, says why it does not answer
instead of trying.
"""

# The most points one grid may have (float64: 160 MB, and seconds of FFTs).
MAX_GRID_POINTS = 2e7


class AccountantLimit(ValueError):
  """A valid setting an accountant cannot compute within MAX_GRID_POINTS.

  Args:
    accountant: the accountant's name ('prv', 'pld', ...).
    reason: why it cannot compute the setting.
  """

  def __init__(self, accountant: str, reason: str):
    self.accountant = accountant
    self.reason = reason
    super().__init__(f"{accountant.upper()} accountant: outside what it can"
                     f" compute: {reason}")


def require_grid(accountant: str, points: float, interval: float,
                 why: str) -> None:
  """Raises AccountantLimit when a grid would exceed MAX_GRID_POINTS."""
  if not points <= MAX_GRID_POINTS:
    raise AccountantLimit(
        accountant,
        f"its grid would need {points:.2g} points (at most"
        f" {MAX_GRID_POINTS:.0e}) at an interval of {interval:.2g}: {why}")
