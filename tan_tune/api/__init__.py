"""The Python API: the pipeline's entry points as functions.

    from tan_tune import api

    found = api.search("search_spaces/digits-demo.yaml")
    print(found.best["trial_id"], found.leaderboard[0])
    promoted = api.promote(found.directory, workers=2, new_ledger=True,
                           register="digits")  # models:/digits@candidate
    print(promoted.plan.privacy.epsilon, promoted.result.metrics)
    print(api.privacy(50_000, 4096, 3.0, 2500).epsilons)
    print(api.calculate(50_000, 4096, None, 2500, target_epsilon=8,
                        sampling=["poisson", "fixed"])["calibration"])
    print(api.train("examples/train-digits.yaml", new_ledger=True,
                    target_epsilon=8).metrics["accuracy"])
    weights = api.load_checkpoint("runs/digits/checkpoint.pt")["model"]
    print(api.audit("search_spaces/digits-demo.yaml").outcome.bounds)
    print(api.ledger().datasets)
    api.export_ledger_key(pathlib.Path("team.key"))  # TAN_TUNE_LEDGER_KEY_FILE
    print(api.registry("digits"))
    api.champion("digits", "1", max_epsilon=2)  # models:/digits@champion

A search file may be passed as a mapping, with your own model and data given
as Python callables (`references.py`). The names `tan_tune.search`,
`tan_tune.promote` and `tan_tune.privacy` are the pipeline's stage packages,
so the functions live here: a stage above `promote/` that may import every
stage below it, and that only `cli/`, a thin layer over it, imports.

Importing it costs nothing: each name loads its module when first used
(PEP 562), so the privacy calculator (`calculator.py`, `choices.py`,
`figures.py`) needs neither Ray, MLflow nor the trainer. Beside the
functions and their results it exports what a caller handles or prints:
the errors it raises (`ConfigError`, `PromotionRefused`, `PromotionFailed`,
`TrialDiverged`, `RegistryRefused`, `AccountantLimit`), the spellings it
accepts (`choices.py`, `release_times.py`), where results are and how to
open them (`reporting.py`, `stores.py`).
"""

import importlib
from typing import TYPE_CHECKING, Any

from tan_tune.errors import ConfigError

if TYPE_CHECKING:
  from tan_tune.api.auditing import Audit
  from tan_tune.api.auditing import audit
  from tan_tune.api.auditing import AUDIT_BASES
  from tan_tune.api.auditing import AUDIT_LOG
  from tan_tune.api.auditing import AuditOutcome
  from tan_tune.api.auditing import AuditPlan
  from tan_tune.api.auditing import PUBLIC_BASE
  from tan_tune.api.calculator import calculate
  from tan_tune.api.calculator import privacy
  from tan_tune.api.calculator import private_search_accounted
  from tan_tune.api.calculator import PrivacyReport
  from tan_tune.api.choices import AccountantLimit
  from tan_tune.api.choices import accountant_names
  from tan_tune.api.choices import Clipping
  from tan_tune.api.choices import CLIPPINGS
  from tan_tune.api.choices import DEFAULT_SAMPLER
  from tan_tune.api.choices import DpSampler
  from tan_tune.api.choices import parse_sampler
  from tan_tune.api.choices import sampler_names
  from tan_tune.api.entry_points import Promotion
  from tan_tune.api.entry_points import promote
  from tan_tune.api.entry_points import PROMOTE_LOG
  from tan_tune.api.entry_points import PromotionFailed
  from tan_tune.api.entry_points import PromotionPlan
  from tan_tune.api.entry_points import PromotionRefused
  from tan_tune.api.entry_points import PromotionResult
  from tan_tune.api.entry_points import search
  from tan_tune.api.entry_points import SEARCH_LOG
  from tan_tune.api.entry_points import SearchResult
  from tan_tune.api.figures import privacy_wall
  from tan_tune.api.one_run import load_checkpoint
  from tan_tune.api.one_run import train
  from tan_tune.api.one_run import Training
  from tan_tune.api.one_run import TrialDiverged
  from tan_tune.api.registered_models import card
  from tan_tune.api.registered_models import champion
  from tan_tune.api.registered_models import registry
  from tan_tune.api.registered_models import RegistryRefused
  from tan_tune.api.registered_models import VersionRow
  from tan_tune.api.release_times import parse_release_time
  from tan_tune.api.release_times import ReleaseAt
  from tan_tune.api.release_times import ReleaseTime
  from tan_tune.api.reporting import BEST_FILE
  from tan_tune.api.reporting import format_params
  from tan_tune.api.reporting import MIN_BATCH_SIZES_TO_CHOOSE
  from tan_tune.api.reporting import PRIVACY_CARD_FILE
  from tan_tune.api.reporting import RELEASED_MODEL_FILE
  from tan_tune.api.reporting import select_on_test_warning
  from tan_tune.api.reporting import SERVED_MODEL_FOLDER
  from tan_tune.api.reporting import SIMULATION_BATCH_SIZE
  from tan_tune.api.reporting import study_storage
  from tan_tune.api.spending import DatasetSpend
  from tan_tune.api.spending import export_ledger_key
  from tan_tune.api.spending import import_ledger_key
  from tan_tune.api.spending import ledger
  from tan_tune.api.spending import LedgerReport
  from tan_tune.api.stores import DEFAULT_TRACKING_URI
  from tan_tune.api.stores import how_to_view
  from tan_tune.api.stores import how_to_view_run

# Each exported name and the module of this package that holds it.
_MODULES = {
    "auditing": ("audit", "Audit", "AuditPlan", "AuditOutcome", "AUDIT_LOG",
                 "AUDIT_BASES", "PUBLIC_BASE"),
    "calculator": ("privacy", "calculate", "private_search_accounted",
                   "PrivacyReport"),
    "choices": ("accountant_names", "sampler_names", "parse_sampler",
                "DpSampler", "DEFAULT_SAMPLER", "Clipping", "CLIPPINGS",
                "AccountantLimit"),
    "entry_points": ("search", "promote", "SearchResult", "Promotion",
                     "PromotionPlan", "PromotionResult", "PromotionRefused",
                     "PromotionFailed", "SEARCH_LOG", "PROMOTE_LOG"),
    "figures": ("privacy_wall",),
    "one_run": ("train", "Training", "TrialDiverged", "load_checkpoint"),
    "registered_models": ("registry", "champion", "card", "RegistryRefused",
                          "VersionRow"),
    "release_times": ("parse_release_time", "ReleaseAt", "ReleaseTime"),
    "reporting": ("BEST_FILE", "RELEASED_MODEL_FILE", "PRIVACY_CARD_FILE",
                  "SERVED_MODEL_FOLDER", "SIMULATION_BATCH_SIZE",
                  "MIN_BATCH_SIZES_TO_CHOOSE",
                  "format_params", "study_storage", "select_on_test_warning"),
    "spending": ("ledger", "LedgerReport", "DatasetSpend",
                 "export_ledger_key", "import_ledger_key"),
    "stores": ("DEFAULT_TRACKING_URI", "how_to_view", "how_to_view_run"),
}
_MODULE_OF = {name: module for module, names in _MODULES.items()
              for name in names}

__all__ = ["ConfigError", *_MODULE_OF]


def __getattr__(name: str) -> Any:
  """`name` from its module, imported on first use (then kept here)."""
  module = _MODULE_OF.get(name)
  if module is None:
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
  value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
  globals()[name] = value
  return value


def __dir__() -> list[str]:
  return sorted({*globals(), *__all__})
