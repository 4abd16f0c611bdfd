"""Privacy triplets and the Total Amount of Noise (TAN).

A DP-SGD run is described by the triplet (q, sigma, S): the Poisson sampling
rate q = B / N (B the expected batch size, N the dataset size), the noise
multiplier sigma and the number of steps S. Sander et al. ("TAN Without a Burn",
ICML 2023, definition 3.1) define the individual signal-to-noise ratio

    eta^2 = 1 / Sigma^2 = q^2 S / (2 sigma^2),      eta_step = q / (sqrt(2) sigma),

so eta^2 = S eta_step^2, and Sigma = 1 / eta is the Total Amount of Noise. While
sigma > 2 the privacy budget depends on eta alone (section 3.2, eq. 4):

    eps_TAN(delta) = eta^2 + 2 eta sqrt(log(1 / delta)).

Two consequences drive tan_tune:

* simulation (section 3.4): training at a small batch B with
  sigma = sigma_ref * B / B_ref and the same S keeps eta_step, hence predicts
  the reference run at B_ref / B times less compute;
* constant-eta triplets (section 4.3): at fixed sigma, B ~ B_ref sqrt(S_ref / S)
  keeps eta, and the learning rate is scaled by S_ref / S (table 3).

Everything here is exact arithmetic; the accountants live in `accounting.py`.
"""

import dataclasses
import enum
import math

from tan_tune.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class PrivacyTriplet:
  """The privacy parameters of one DP-SGD run, with the dataset size.

  Attributes:
    dataset_size: N, the number of training examples.
    batch_size: B, the expected batch size of Poisson sampling (q = B / N).
    noise_multiplier: sigma, noise std divided by the clipping norm C.
    steps: S, the number of noisy gradient steps.
  """

  dataset_size: int
  batch_size: int
  noise_multiplier: float
  steps: int

  def __post_init__(self):
    _require_positive_int("dataset_size", self.dataset_size)
    _require_positive_int("batch_size", self.batch_size)
    _require_positive_int("steps", self.steps)
    if not (
        isinstance(self.noise_multiplier, (int, float))
        and math.isfinite(self.noise_multiplier)
        and self.noise_multiplier > 0
    ):
      raise ConfigError(
          "noise_multiplier",
          self.noise_multiplier,
          "expected a finite number > 0",
      )
    if self.batch_size > self.dataset_size:
      raise ConfigError(
          "batch_size",
          self.batch_size,
          f"the expected batch size must be at most the dataset size N ="
          f" {self.dataset_size}",
      )

  @property
  def sampling_rate(self) -> float:
    """q = B / N, the Poisson sampling rate (not Opacus' 1 / len(loader))."""
    return self.batch_size / self.dataset_size

  @property
  def eta_step(self) -> float:
    """eta_step = q / (sqrt(2) sigma), the per-step signal-to-noise ratio."""
    return self.sampling_rate / (math.sqrt(2.0) * self.noise_multiplier)

  @property
  def eta(self) -> float:
    """eta = sqrt(S) eta_step, i.e. eta^2 = q^2 S / (2 sigma^2)."""
    return math.sqrt(self.steps) * self.eta_step

  @property
  def total_amount_of_noise(self) -> float:
    """Sigma = 1 / eta, the paper's TAN."""
    return 1.0 / self.eta

  @property
  def epochs(self) -> float:
    """S q: how many passes over the data the run makes, in expectation."""
    return self.steps * self.sampling_rate

  def eps_tan(self, delta: float) -> float:
    """eps_TAN(delta) = eta^2 + 2 eta sqrt(log(1/delta)) (eq. 4).

    An approximation of the RDP epsilon, valid while sigma > 2; never report it
    as a guarantee.

    Args:
      delta: the target delta, in (0, 1).
    """
    require_delta(delta)
    return self.eta**2 + 2.0 * self.eta * math.sqrt(math.log(1.0 / delta))


def eta_for_eps_tan(eps_tan: float, delta: float) -> float:
  """The eta at which eps_TAN(delta) equals `eps_tan` (eq. 4 solved for eta).

  eta = sqrt(log(1/delta) + eps_TAN) - sqrt(log(1/delta)).
  """
  require_delta(delta)
  log_inv_delta = math.log(1.0 / delta)
  return math.sqrt(log_inv_delta + eps_tan) - math.sqrt(log_inv_delta)


def require_delta(delta: float) -> None:
  """Raises ConfigError unless 0 < delta < 1."""
  if not (isinstance(delta, (int, float)) and 0.0 < delta < 1.0):
    raise ConfigError("delta", delta, "expected a number in (0, 1)")


def require_private_delta(field: str, delta: float | None,
                          dataset_size: int) -> None:
  """Raises ConfigError unless a private run's delta is unset or <= 1/N.

  With delta > 1/N, the mechanism that publishes one random example outright
  is (0, delta)-DP: the guarantee no longer protects anyone in particular.
  delta = 1/N itself is allowed: it is the default (the paper's choice,
  section 4.1) that every run and ledger entry without a delta has, and it
  still admits that mechanism; a smaller delta (1/(10 N), say) rules it out.
  """
  if delta is not None and delta > 1 / dataset_size:
    raise ConfigError(
        field, delta,
        f"at most 1/N = {1 / dataset_size:.4g} for a private run: a larger"
        " delta allows releasing an example outright")


def _require_positive_int(field: str, value: object) -> None:
  if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
    raise ConfigError(field, value, "expected a positive integer")


def rescale(triplet: PrivacyTriplet, batch_size: int) -> PrivacyTriplet:
  """The same run at another batch size B': same S and eta_step.

  eta_step = q / (sqrt(2) sigma) is kept by scaling sigma with B:
  sigma' = sigma B' / B. Down, this is a simulation; up, the run it simulates.
  """
  return dataclasses.replace(
      triplet,
      batch_size=batch_size,
      noise_multiplier=triplet.noise_multiplier * batch_size / triplet.batch_size,
  )


def simulate(reference: PrivacyTriplet, batch_size: int) -> PrivacyTriplet:
  """The TAN-equivalent triplet at a smaller batch (section 3.4).

  Keeps S and eta_step: sigma = sigma_ref * B / B_ref. Its epsilon is large and
  meaningless; it predicts the accuracy of the reference run, not its privacy.

  Args:
    reference: the triplet (N, B_ref, sigma_ref, S) of the run to predict.
    batch_size: B, the simulation's expected batch size, at most B_ref.
  """
  _require_positive_int("simulate_batch_size", batch_size)
  if batch_size > reference.batch_size:
    raise ConfigError(
        "simulate_batch_size",
        batch_size,
        f"a simulation runs at a batch size at most B_ref ="
        f" {reference.batch_size}",
    )
  return rescale(reference, batch_size)


def compute_saving(reference: PrivacyTriplet, simulated: PrivacyTriplet) -> float:
  """B_ref / B: how many times fewer examples the simulation processes."""
  return reference.batch_size / simulated.batch_size


@dataclasses.dataclass(frozen=True)
class ConstantEtaTriplet:
  """One alternative to a reference triplet at the same eta and sigma.

  Attributes:
    triplet: (N, B, sigma_ref, S) with B = B_ref sqrt(S_ref / S).
    lr_scale: S_ref / S, the factor the paper applies to the learning rate to
      keep the magnitude of the noisy updates (table 3).
  """

  triplet: PrivacyTriplet
  lr_scale: float


def constant_eta_batch_size(batch_size: int, steps: int,
                            other_steps: int) -> int:
  """B' = round(B sqrt(S / S')): the batch that keeps eta (and sigma) at S'
  steps instead of S, since eta^2 = q^2 S / (2 sigma^2)."""
  return round(batch_size * math.sqrt(steps / other_steps))


def constant_eta_triplets(
    reference: PrivacyTriplet, steps_grid: list[int] | tuple[int, ...]
) -> list[ConstantEtaTriplet]:
  """Triplets at the reference eta and sigma for other numbers of steps.

  eta^2 = q^2 S / (2 sigma^2) is constant at fixed sigma when q ~ 1 / sqrt(S),
  so B = round(B_ref sqrt(S_ref / S)) (section 4.3; the rounding moves eta by
  less than 1 / (2 B)).

  Args:
    reference: the reference triplet.
    steps_grid: the numbers of steps S to offer.

  Raises:
    ConfigError: a step count is not a positive integer, or gives B > N.
  """
  alternatives = []
  for steps in steps_grid:
    _require_positive_int("steps_grid", steps)
    batch_size = constant_eta_batch_size(reference.batch_size,
                                         reference.steps, steps)
    if batch_size > reference.dataset_size:
      raise ConfigError(
          "steps_grid",
          steps,
          f"S = {steps} needs B = {batch_size} > N = {reference.dataset_size};"
          " use more steps",
      )
    alternatives.append(
        ConstantEtaTriplet(
            triplet=dataclasses.replace(
                reference, batch_size=max(1, batch_size), steps=steps
            ),
            lr_scale=reference.steps / steps,
        )
    )
  return alternatives


def simulate_alternative(
    alternative: ConstantEtaTriplet,
    reference: PrivacyTriplet,
    simulated_reference: PrivacyTriplet,
) -> ConstantEtaTriplet:
  """A constant-eta alternative shrunk by the simulation factor (table 3).

  The alternative's batch is divided by B_ref / B_sim, like its sigma, so the
  simulated alternatives keep each other's eta ratio and eta_step.
  """
  factor = simulated_reference.batch_size / reference.batch_size
  batch_size = max(1, round(alternative.triplet.batch_size * factor))
  return dataclasses.replace(
      alternative, triplet=rescale(alternative.triplet, batch_size)
  )


class Regime(enum.Enum):
  """Where a triplet sits relative to the privacy wall (figure 2).

  At constant eta, eps stays near eps_TAN for sigma >= 2 and surges below.
  """

  WALL = "privacy wall"  # sigma < 0.5: eps far above eps_TAN.
  TRANSITION = "transition"  # 0.5 <= sigma < 2: eps above eps_TAN.
  TAN = "TAN regime"  # sigma >= 2: eps ~ eps_TAN, simulation is sound.

  @property
  def explanation(self) -> str:
    return {
        Regime.WALL: (
            "sigma < 0.5: past the privacy wall, eps is far above eps_TAN;"
            " raise sigma and B together"
        ),
        Regime.TRANSITION: (
            "0.5 <= sigma < 2: eps exceeds eps_TAN; doubling B and sigma"
            " lowers eps at the same eta"
        ),
        Regime.TAN: (
            "sigma >= 2: eps depends on eta alone (eps ~ eps_TAN)"
        ),
    }[self]


def regime(triplet: PrivacyTriplet) -> Regime:
  """The privacy-wall regime of a triplet, from its noise multiplier."""
  if triplet.noise_multiplier < 0.5:
    return Regime.WALL
  if triplet.noise_multiplier < 2.0:
    return Regime.TRANSITION
  return Regime.TAN


def scale_dataset(
    triplet: PrivacyTriplet, beta: float, delta: float
) -> tuple[PrivacyTriplet, float]:
  """The same (B, sigma, S) on beta times more data (section 4.4, table 5).

  q, hence eta, is divided by beta; delta = 1/N is divided by beta too.

  Returns:
    The triplet at N' = round(beta N) and the delta to account it with.
  """
  if not (isinstance(beta, (int, float)) and math.isfinite(beta) and beta > 0):
    raise ConfigError("beta", beta, "expected a finite number > 0")
  require_delta(delta)
  dataset_size = round(triplet.dataset_size * beta)
  return dataclasses.replace(triplet, dataset_size=dataset_size), delta / beta
