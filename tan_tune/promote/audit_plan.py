"""`tan-tune audit`: an empirical lower bound on epsilon for a run as coded.

The audited run is one of: a private trial config (the file `tan-tune train`
takes), a search file's reference run (its hyper-parameters at the centre of
the space, `trials.central_params`), or a finished search's winner (the run
`promote` would train). The audit trains it once, through the promoted run's
path (Ray Train, data parallel, micro-batches, its clipping engine and
sampler), on base examples plus m input canaries and m gradient canaries,
each included with probability 1/2 from a secret draw (`training/canaries.py`);
then guesses which canaries were in from the final model and turns the right
guesses into eps_lb at the stated confidence (`privacy/audit.py`).

The audit run keeps the audited run's sampling rate q = B / N, sigma, S, C
and delta. It trains on N_a = base + included canaries, but N_a counts the
secretly included canaries, which the one-run audit assumes hidden, so it
is never published, nor anything computed from it. Under Poisson sampling
the audit run's triplet is that of its public universe, every canary
counted whether included or not:

  N_u = base + m |kinds|,  B_a = round(q N_u),  delta = min(delta, 1 / N_u),

and its sampler draws each present row with probability B_a / N_u, an
absent canary never (`sampling.py`): Poisson sampling of the universe, so
the accountant's eps at (N_u, B_a, sigma, S) is exact, and the audited
run's up to the rounding of B_a. eps_lb is compared with it. A fixed-size
sampler draws B_a of the rows present, a rate of B_a / N_a: it is audited
on public data only, at (N_a, round(q N_a)).

By default the base examples are the dataset's test split: the audit tests
the code on public data and spends no budget. With base 'private' it trains
on the private training split: a private run, charged to the dataset's
ledger before it trains, like `tan-tune train`.
"""

import dataclasses
import math
import pathlib
import secrets
from typing import Any

from tan_tune import config_io
from tan_tune.errors import ConfigError
from tan_tune.privacy import accounting
from tan_tune.privacy import audit
from tan_tune.privacy import triplet as triplet_lib
from tan_tune.promote import search_outcome
from tan_tune.search import resolved as resolved_lib
from tan_tune.search import space as space_lib
from tan_tune.search import trial_record
from tan_tune.search import trials
from tan_tune.training import canaries as canaries_lib
from tan_tune.training import datasets
from tan_tune.training import trial_config

# The bits of the secret canary draw.
_MASK_BITS = 63


@dataclasses.dataclass(frozen=True)
class AuditPlan:
  """One audit, before it runs.

  Attributes:
    source: what is audited, in words.
    name: a short name for the MLflow experiment and run.
    audited: the run the audit stands for.
    audited_size: N, that run's training-set size.
    config: the audit run: the audited run on the base examples and the
      canaries, at B_a.
    dataset_size: N of the audit run's triplet: N_u, its universe, under
      Poisson sampling; N_a, the rows present, with a fixed-size sampler
      (public data only).
    guesses: r per kind of canary.
    confidence: 1 - beta of eps_lb.
  """

  source: str
  name: str
  audited: trial_config.TrialConfig
  audited_size: int
  config: trial_config.TrialConfig
  dataset_size: int
  guesses: int
  confidence: float

  @property
  def private(self) -> bool:
    """Trained on the private data: a private run, charged."""
    return self.config.canaries.base == canaries_lib.PRIVATE

  @property
  def universe(self) -> bool:
    """Sampled over the universe: N is N_u, not N_a."""
    return self.config.privacy.scheme.sampler.independent_membership

  @property
  def delta(self) -> float:
    return self.config.privacy.delta

  @property
  def triplet(self) -> triplet_lib.PrivacyTriplet:
    """The audit run's (N, B_a, sigma, S), N = `dataset_size`."""
    privacy = self.config.privacy
    return triplet_lib.PrivacyTriplet(
        self.dataset_size, privacy.batch_size, privacy.noise_multiplier,
        privacy.steps)

  def epsilon(self) -> accounting.EpsilonReport:
    """The accountant's eps of the audit run: what eps_lb tests."""
    return accounting.epsilon(self.triplet, self.delta,
                              scheme=self.config.privacy.scheme)

  def audited_epsilon(self) -> accounting.EpsilonReport:
    """The accountant's eps of the run the audit stands for."""
    privacy = self.audited.privacy
    return accounting.epsilon(
        dataclasses.replace(self.triplet, dataset_size=self.audited_size,
                            batch_size=privacy.batch_size),
        accounting.delta_or_default(privacy.delta, self.audited_size),
        scheme=privacy.scheme)

  def as_dict(self) -> dict[str, Any]:
    """What the plan publishes: never the secret draw, nor N_a of a run
    sampled over its universe (public values only)."""
    canaries = self.config.canaries
    epsilon = self.epsilon()
    return {
        "source": self.source,
        "canaries": canaries.count,
        "kinds": list(canaries.kinds),
        "base": canaries.base,
        "guesses": self.guesses,
        "confidence": self.confidence,
        "delta": self.delta,
        # N_u, or N_a of a fixed-size sampler on public data.
        ("universe_size" if self.universe else "training_size"):
            self.dataset_size,
        "audited_size": self.audited_size,
        "batch_size": self.config.privacy.batch_size,
        "audited_batch_size": self.audited.privacy.batch_size,
        "noise_multiplier": self.config.privacy.noise_multiplier,
        "steps": self.config.privacy.steps,
        "clip_norm": self.config.privacy.clip_norm,
        "clipping": self.config.clipping,
        "epsilon": epsilon.epsilon,
        "accountant": epsilon.accountant,
        "adjacency": self.config.privacy.adjacency,
        "sampling": self.config.privacy.sampling,
        "audited_epsilon": self.audited_epsilon().epsilon,
    }


def audited_run(target: pathlib.Path, trial_id: str | None = None,
                tracking_uri: str | None = None
                ) -> tuple[trial_config.TrialConfig, str, str]:
  """The run `target` names: (its config, what it is in words, a name).

  Raises:
    ConfigError: the target is none of a search directory, a search file
      or a private trial config.
  """
  if target.is_dir():
    outcome = search_outcome.load_search_directory(target, tracking_uri)
    winner = search_outcome.pick_trial(outcome, trial_id)
    config = trial_record.build(outcome.resolved,
                                winner["params"]).reference_run
    return (config, f"trial {winner['trial_id']} of the search in {target},"
            " at its reference triplet", outcome.space.name)
  if trial_id is not None:
    raise ConfigError("--trial", trial_id, "only with a search directory")
  document = config_io.load_yaml(target)
  if "reference" in document:
    space = space_lib.load_search_space(target)
    data = datasets.load_dataset(space.dataset)
    resolved = resolved_lib.resolve(space, data.num_train)
    config = trial_record.build(resolved,
                                trials.central_params(space)).reference_run
    return (config, f"the reference run of {target}, its hyper-parameters"
            " at the centre of the space", space.name)
  config = config_io.from_dict(trial_config.TrialConfig, document)
  if not config.privacy.claims_privacy:
    raise ConfigError(
        "privacy", target,
        "a private run to audit (DP-SGD, no reference_batch_size): a"
        " simulation or a non-private baseline claims no guarantee")
  return config, f"the run of {target}", target.stem


def plan_audit(target: pathlib.Path, trial_id: str | None = None,
               canaries: int = 1000, guesses: int | None = None,
               base: str = canaries_lib.PUBLIC, confidence: float = 0.95,
               tracking_uri: str | None = None) -> AuditPlan:
  """The audit of `target`'s run, its canaries drawn in secret.

  Args:
    target: a search directory, a search file or a trial config.
    trial_id: a search directory's trial (default: its best).
    canaries: m, of each kind.
    guesses: r per kind (default m / 5, at least 2).
    base: 'public' (the test split) or 'private' (the training split).
    confidence: of eps_lb.
    tracking_uri: where the search directory's MLflow runs are.

  Raises:
    ConfigError: a bad option, or a run that does not fit its data.
  """
  if not 0 < confidence < 1:
    raise ConfigError("--confidence", confidence, "a number in (0, 1)")
  guesses = max(2, canaries // 5) if guesses is None else guesses
  if not 2 <= guesses <= canaries:
    raise ConfigError("--guesses", guesses,
                      f"an integer in [2, --canaries = {canaries}]")
  audited, source, name = audited_run(target, trial_id, tracking_uri)
  sampler = audited.privacy.scheme.sampler
  if base == canaries_lib.PRIVATE and not sampler.independent_membership:
    raise ConfigError(
        "--base", base,
        f"'public' for a run with {audited.privacy.sampling} sampling: it"
        " draws B of the rows present, so on private data its rate would"
        " reveal how many canaries are in")
  mask_seed = secrets.randbits(_MASK_BITS)
  canary_config = canaries_lib.CanaryConfig(count=canaries, base=base,
                                            mask_seed=mask_seed)
  data = datasets.load_dataset(audited.dataset)
  size = data.num_train
  privacy = audited.privacy
  if privacy.batch_size > size:
    raise ConfigError("privacy.batch_size", privacy.batch_size,
                      f"at most the training-set size N = {size}")
  base_size = (len(data.test) if base == canaries_lib.PUBLIC else size)
  if sampler.independent_membership:  # Public, whatever the secret draw.
    dataset_size = canary_config.universe_size(base_size)
  else:  # Public data only (refused above on private).
    dataset_size = base_size + sum(
        int(v.sum()) for v in canary_config.included().values())
  batch = max(1, math.floor(privacy.batch_size / size * dataset_size + 0.5))
  # The audited run's delta, at most 1 / N as any private run's.
  delta = min(accounting.delta_or_default(privacy.delta, size),
              accounting.default_delta(dataset_size))
  config = dataclasses.replace(
      audited, canaries=canary_config,
      privacy=dataclasses.replace(privacy, batch_size=batch, delta=delta))
  return AuditPlan(source=source, name=name, audited=audited,
                   audited_size=size, config=config,
                   dataset_size=dataset_size, guesses=guesses,
                   confidence=confidence)


def bounds(plan: AuditPlan, scores: dict[str, Any]) -> dict[str, audit.Bound]:
  """eps_lb per kind of canary from the final model's scores."""
  included = plan.config.canaries.included()
  return {kind: audit.bound(scores[kind], included[kind], plan.guesses,
                            plan.delta, plan.confidence)
          for kind in plan.config.canaries.kinds}
