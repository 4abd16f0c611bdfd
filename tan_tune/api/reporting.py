"""What a caller prints beside a search's or a promotion's result.

Where their files are (the winner, a private search's released weights,
the Optuna study, the promoted run's MLflow Model and privacy card), the
keys and limits their plans are read by, and the words for their settings:
`tan-tune search` and `tan-tune promote` print them, and so may any caller.
"""

from tan_tune.promote import scaling_law
from tan_tune.registry import privacy_card
from tan_tune.registry import served_model
from tan_tune.search import private_search
from tan_tune.search import search_files
from tan_tune.search import space as space_lib
from tan_tune.search import trials
# Re-exported as the API's own, so that its reference renders the functions.
from tan_tune.search.results import study_storage
from tan_tune.search.tracking import format_params

BEST_FILE = search_files.BEST_FILE
"""The winner, in a search's directory (`tan-tune promote` reads it)."""
RELEASED_MODEL_FILE = private_search.MODEL_FILE
"""A private random search's released weights, in its directory."""
PRIVACY_CARD_FILE = privacy_card.MARKDOWN_FILE
"""The privacy card (Markdown) logged on a private run."""
SERVED_MODEL_FOLDER = served_model.FOLDER
"""The MLflow Model's folder among a promoted run's artifacts."""
SIMULATION_BATCH_SIZE = trials.SIMULATION_BATCH_SIZE
"""The key of a calibration run's batch size, in a plan's `calibration`."""
MIN_BATCH_SIZES_TO_CHOOSE = scaling_law.MIN_BATCH_SIZES_TO_CHOOSE
"""Fewer batch sizes than this cannot choose the scaling law by backtest."""


def select_on_test_warning(space: space_lib.SearchSpace) -> str | None:
  """What to say of a winner chosen on the test split (its score is then
  no estimate of accuracy on unseen data); None when chosen otherwise.

  Args:
    space: the search's loaded space (a promotion plan's `outcome.space`).
  """
  return (space_lib.SELECT_ON_TEST_WARNING if space.select_on == "test"
          else None)
