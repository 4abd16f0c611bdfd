"""What a candidate reference run costs, the budget a search may set, and
the front of accuracy against cost.

A reference run (B'_ref, sigma_ref, S) samples B'_ref examples a step for S
steps, and each passes through the network in K augmented copies (AugMult),
so its compute is C = B'_ref S K example passes. At constant eta a
candidate with more steps takes a smaller batch, B'_ref = B_ref sqrt(S_ref /
S) (TAN section 4.3), so C grows as sqrt(S): the steps a search may try are
those whose C fits the budget. The network's width changes the seconds an
example pass takes, not C; the seconds a trial measured are shown beside it.
"""

import dataclasses
from typing import Sequence

from tan_tune.errors import ConfigError
from tan_tune.privacy import triplet as triplet_lib


@dataclasses.dataclass(frozen=True)
class ComputeBudget:
  """The most compute a candidate reference run may take.

  Attributes:
    examples: C = B'_ref S K at most, in example passes.
  """

  examples: float

  def __post_init__(self) -> None:
    if (isinstance(self.examples, bool)
        or not isinstance(self.examples, (int, float))
        or not self.examples > 0):
      raise ConfigError("compute_budget.examples", self.examples,
                        "a number of example passes > 0 (B'_ref S K)")


def reference_examples(batch_size: int, steps: int,
                       multiplicity: int = 1) -> int:
  """C = B S K: the example passes of a run of S steps at batch B, each
  example in K augmented copies."""
  return batch_size * steps * multiplicity


def candidate_examples(reference_batch_size: int, reference_steps: int,
                       steps: int, multiplicity: int = 1) -> int:
  """C of the constant-eta candidate at `steps` of the reference run."""
  batch_size = triplet_lib.constant_eta_batch_size(
      reference_batch_size, reference_steps, steps)
  return reference_examples(batch_size, steps, multiplicity)


def affordable_steps(budget: ComputeBudget, reference_batch_size: int,
                     reference_steps: int, steps_grid: Sequence[int],
                     max_multiplicity: int) -> tuple[int, ...]:
  """The S of `steps_grid` whose candidate fits the budget at the largest K
  the search may draw (so that no trial it proposes exceeds it).

  Raises:
    ConfigError: none fits.
  """
  fitting = tuple(
      steps for steps in steps_grid
      if candidate_examples(reference_batch_size, reference_steps, steps,
                            max_multiplicity) <= budget.examples)
  if not fitting:
    cheapest = min(candidate_examples(reference_batch_size, reference_steps,
                                      steps, max_multiplicity)
                   for steps in steps_grid)
    raise ConfigError(
        "compute_budget.examples", budget.examples,
        f"at least the cheapest candidate's C = B'_ref S K = {cheapest:,}"
        f" (K = {max_multiplicity}, the largest augmult searched)")
  return fitting


def pareto_front(points: Sequence[tuple[float, float | None]],
                 maximise: bool = True) -> list[bool]:
  """Which (cost, score) points are on the front: no other point costs at
  most as much and scores at least as well, one of them strictly. A point
  without a score is never on it."""
  sign = 1 if maximise else -1

  def dominates(a, b) -> bool:
    better = sign * a[1] >= sign * b[1]
    strictly = a[0] < b[0] or sign * a[1] > sign * b[1]
    return a[0] <= b[0] and better and strictly

  scored = [p for p in points if p[1] is not None]
  return [p[1] is not None and not any(dominates(q, p) for q in scored)
          for p in points]
