"""Which runs predict the promoted run's accuracy, and which to add.

The scaling law (`scaling_law.py`) is fitted to runs that were not selected
for their score: the calibration runs of the winner at B_ref / 64, / 32,
/ 16 (paper, figure 4), trained and scored as the promoted run will be;
without them, the trials with the winner's hyper-parameters at other batch
sizes, scored on validation. The winner's own search score is the maximum of many noisy trials
(winner's curse): it is shown apart and never fitted.

Nothing here trains: `calibration_runs.py` trains the runs a plan lists.
"""

from typing import Any

from tan_tune.promote.search_outcome import SearchOutcome
from tan_tune.search import trial_record
from tan_tune.search import trials

# Calibration trains the winner at B_ref / d for each d (paper, figure 4).
CALIBRATION_DIVISORS = (64, 32, 16)


def _same_hyperparameters(
    outcome: SearchOutcome, winner: dict[str, Any]
) -> list[dict[str, Any]]:
  """Finished trials that differ from the winner in simulation_batch_size only.

  The winner itself included.
  """
  def others(params):
    return {k: v for k, v in params.items()
            if k != trials.SIMULATION_BATCH_SIZE}

  metric = outcome.space.metric
  return [row for row in outcome.leaderboard
          if row["status"] == "finished" and row[metric] is not None
          and others(row["params"]) == others(winner["params"])]


def scaling_points(
    outcome: SearchOutcome, winner: dict[str, Any]
) -> list[tuple[int, float]]:
  """(B, metric) of finished trials with the winner's hyper-parameters.

  The winner's own score is left out: it was selected for being the best,
  so it overestimates its run (winner's curse). B is each one's simulated
  batch (which a constant-eta S rescales).
  """
  points = []
  for row in _same_hyperparameters(outcome, winner):
    if row["trial_id"] == winner["trial_id"]:
      continue
    simulated = trial_record.build(outcome.resolved, row["params"]).simulated
    points.append((simulated.batch_size, row[outcome.space.metric]))
  return points


def calibration_params(
    outcome: SearchOutcome,
    winner: dict[str, Any],
    divisors: tuple[int, ...] = CALIBRATION_DIVISORS,
) -> list[dict[str, Any]]:
  """The winner's params at B_ref / d for each d.

  Batches the search already ran are run again: the search scored them on
  validation, the calibration scores them as the promoted run will be
  (`calibration_runs.py`). `simulation_batch_size` is in the file's B_ref
  units; a constant-eta S rescales it like the search's own batches.
  """
  key = trials.SIMULATION_BATCH_SIZE
  batches = {outcome.space.reference.batch_size // d for d in divisors}
  return [dict(winner["params"], **{key: batch})
          for batch in sorted(batches - {0})]
