"""eps_lb against eps: `tan-tune audit` of the shipped configurations.

Audits, each in one run with m input canaries (black box) and m gradient
canaries (white box) on public data (the test split), through the same path
as `tan-tune audit` (Ray Train, the run's clipping engine and sampler):

1. the digits demo's promoted configuration: a real `tan-tune search` of
   search_spaces/digits-demo.yaml (or --digits-search DIR, a finished one),
   its winner at the reference triplet; then the same run with sigma
   divided by 2, 4 and 10, for eps_lb as eps grows;
2. the Fashion-MNIST reference run of search_spaces/fashion-mnist-cnn.yaml
   (hyper-parameters at the centre of the space), when the dataset is
   installed (apt-get install dataset-fashion-mnist), and the same with
   sigma / 4.

Prints one row per audit and kind of canary: the audit run's eps (its
accountant), delta, W of r, eps_lb at 95% and the ceiling, the f-DP
audit's eps_lb and ceiling from the same guesses, and the wall time, which
includes Ray Train's start-up.

Run: .venv/bin/python benchmarks/audit.py [--canaries 1000]
     [--digits-search runs/digits-demo] [--skip-fashion] [--smoke]
"""

import argparse
import dataclasses
import pathlib
import subprocess
import sys
import tempfile

import yaml

import _smoke
from tan_tune import config_io
from tan_tune.errors import ConfigError
from tan_tune.promote import audit_plan
from tan_tune.promote import audit_run
from tan_tune.training import datasets

_ROOT = pathlib.Path(__file__).resolve().parent.parent
_DIGITS = _ROOT / "search_spaces" / "digits-demo.yaml"
_FASHION = _ROOT / "search_spaces" / "fashion-mnist-cnn.yaml"
_DIGITS_SCALES = (1, 2, 4, 10)
_FASHION_SCALES = (1, 4)


def _search(scratch: pathlib.Path, smoke: bool) -> pathlib.Path:
  """A real digits demo search; returns its directory."""
  space = _smoke.shrunken_copy(_DIGITS, scratch) if smoke else _DIGITS
  command = [str(pathlib.Path(sys.executable).parent / "tan-tune"), "search",
             str(space), "--storage", str(scratch / "runs"),
             "--tracking-uri", f"sqlite:///{scratch}/search.db"]
  print("$", " ".join(command), flush=True)
  subprocess.run(command, check=True, cwd=_ROOT)
  return scratch / "runs" / "digits-demo"


def _scaled(plan: audit_plan.AuditPlan, scale: float,
            scratch: pathlib.Path) -> pathlib.Path:
  """The audited run with sigma / scale, as a trial config file."""
  privacy = plan.audited.privacy
  config = dataclasses.replace(plan.audited, privacy=dataclasses.replace(
      privacy, noise_multiplier=privacy.noise_multiplier / scale))
  path = scratch / f"{plan.name}-sigma-over-{scale}.yaml"
  path.write_text(yaml.safe_dump(config_io.to_dict(config)))
  return path


def _audit(label: str, target: pathlib.Path, args,
           scratch: pathlib.Path) -> audit_plan.AuditPlan:
  """Audits `target`; prints its table rows as soon as they are known."""
  plan = audit_plan.plan_audit(target, canaries=args.canaries)
  outcome = audit_run.run_audit(plan, f"sqlite:///{scratch}/audit.db",
                                scratch / "audits")
  epsilon = plan.epsilon()
  for kind, found in outcome.bounds.items():
    print(
        f"| {label} | {epsilon.epsilon:.3g} ({epsilon.accountant}) |"
        f" {plan.delta:.2g} | {kind} | {found.correct}/{found.guesses} |"
        f" {found.epsilon_lower_bound:.2f} | {found.ceiling:.2f} |"
        f" {found.fdp_epsilon_lower_bound:.2f} | {found.fdp_ceiling:.2f} |"
        f" {outcome.seconds:.0f} s |", flush=True)
  return plan


def _has_fashion() -> bool:
  try:
    datasets.load_dataset(datasets.DatasetConfig("fashion-mnist"))
  except ConfigError:
    return False
  return True


def _audits(search: pathlib.Path, scales: tuple[float, ...], args,
            scratch: pathlib.Path) -> None:
  """The table's rows: the digits search's winner at each sigma / scale,
  then the Fashion-MNIST reference run's."""
  plan = _audit("digits demo, promoted config", search, args, scratch)
  for scale in scales[1:]:
    _audit(f"the same, sigma / {scale}", _scaled(plan, scale, scratch),
           args, scratch)
  if args.skip_fashion:
    print("Fashion-MNIST skipped (--skip-fashion)")
  elif not _has_fashion():
    print("Fashion-MNIST skipped: apt-get install dataset-fashion-mnist")
  else:
    plan = _audit("Fashion-MNIST reference run", _FASHION, args, scratch)
    for scale in _FASHION_SCALES[1:]:
      _audit(f"the same, sigma / {scale}", _scaled(plan, scale, scratch),
             args, scratch)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--canaries", type=int, default=1000)
  parser.add_argument("--digits-search", type=pathlib.Path)
  parser.add_argument("--skip-fashion", action="store_true")
  parser.add_argument("--smoke", action="store_true",
                      help="a one-trial search of 4 steps, 10 canaries, sigma"
                      " and sigma / 10 on digits only, both audits on one"
                      " Ray: a check that it runs")
  args = parser.parse_args()
  scales = _DIGITS_SCALES
  if args.smoke:
    args.canaries, args.skip_fashion, scales = 10, True, (1, 10)
  print("| audited run | eps (accountant) | delta | canaries | W/r |"
        " eps_lb (95%) | ceiling | f-DP eps_lb | f-DP ceiling | wall |\n"
        "|---|---|---|---|---|---|---|---|---|---|", flush=True)
  with tempfile.TemporaryDirectory() as folder:
    scratch = pathlib.Path(folder)
    search = args.digits_search or _search(scratch, args.smoke)
    with _smoke.local_ray(args.smoke):
      _audits(search, scales, args, scratch)


if __name__ == "__main__":
  main()
