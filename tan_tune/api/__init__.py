"""The Python API: the pipeline's entry points as functions.

    from tan_tune import api

    found = api.search("search_spaces/digits-demo.yaml")
    print(found.best["trial_id"], found.leaderboard[0])
    promoted = api.promote(found.directory, workers=2, new_ledger=True,
                           register="digits")  # models:/digits@candidate
    print(promoted.plan.privacy.epsilon, promoted.result.metrics)
    print(api.privacy(50_000, 4096, 3.0, 2500).epsilons)
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
"""

from tan_tune.api.auditing import Audit
from tan_tune.api.auditing import audit
from tan_tune.api.entry_points import privacy
from tan_tune.api.entry_points import Promotion
from tan_tune.api.entry_points import promote
from tan_tune.api.entry_points import search
from tan_tune.api.one_run import train
from tan_tune.api.one_run import Training
from tan_tune.api.registered_models import card
from tan_tune.api.registered_models import champion
from tan_tune.api.registered_models import registry
from tan_tune.api.registered_models import RegistryRefused
from tan_tune.api.registered_models import VersionRow
from tan_tune.api.spending import DatasetSpend
from tan_tune.api.spending import export_ledger_key
from tan_tune.api.spending import import_ledger_key
from tan_tune.api.spending import ledger
from tan_tune.api.spending import LedgerReport
from tan_tune.privacy.report import PrivacyReport
from tan_tune.promote.audit_plan import AuditPlan
from tan_tune.promote.audit_run import AuditOutcome
from tan_tune.promote.plan import PromotionPlan
from tan_tune.promote.run import PromotionResult
from tan_tune.search.driver import SearchResult
from tan_tune.training.checkpoint_file import load as load_checkpoint
from tan_tune.training.trial import TrialDiverged

__all__ = ["search", "promote", "privacy", "train", "audit", "ledger",
           "SearchResult", "Promotion", "PromotionPlan", "PromotionResult",
           "PrivacyReport", "Training", "TrialDiverged", "Audit", "AuditPlan",
           "AuditOutcome", "LedgerReport", "DatasetSpend", "registry",
           "champion", "card", "RegistryRefused", "VersionRow",
           "load_checkpoint", "export_ledger_key", "import_ledger_key"]
