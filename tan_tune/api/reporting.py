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
from tan_tune.search import results
from tan_tune.search import search_files
from tan_tune.search import space as space_lib
from tan_tune.search import tracking
from tan_tune.search import trials

# The winner, in a search's directory (`tan-tune promote` reads it).
BEST_FILE = search_files.BEST_FILE
# A private random search's released weights, in its directory.
RELEASED_MODEL_FILE = private_search.MODEL_FILE
# The privacy card (Markdown) logged on a private run.
PRIVACY_CARD_FILE = privacy_card.MARKDOWN_FILE
# The MLflow Model's folder among a promoted run's artifacts.
SERVED_MODEL_FOLDER = served_model.FOLDER
# The key of a calibration run's batch size, in a plan's `calibration`.
SIMULATION_BATCH_SIZE = trials.SIMULATION_BATCH_SIZE
# Fewer batch sizes than this cannot choose the scaling law by backtest.
MIN_BATCH_SIZES_TO_CHOOSE = scaling_law.MIN_BATCH_SIZES_TO_CHOOSE
# 'lr=1.108, momentum=0, ...': hyper-parameters as people read them.
format_params = tracking.format_params
# A search's Optuna study, from its directory: `optuna-dashboard <this>`.
study_storage = results.study_storage


def select_on_test_warning(space: space_lib.SearchSpace) -> str | None:
  """What to say of a winner chosen on the test split (its score is then
  no estimate of accuracy on unseen data); None when chosen otherwise."""
  return (space_lib.SELECT_ON_TEST_WARNING if space.select_on == "test"
          else None)
