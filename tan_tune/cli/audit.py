"""`tan-tune audit`: eps_lb from one run of the code, beside the accountant's eps."""

import argparse
import json
import pathlib

from tan_tune import api
from tan_tune import console as console_lib
from tan_tune.cli import args as cli_args

LOG_FILE = api.AUDIT_LOG

_DESCRIPTION = """\
Audit the DP-SGD code empirically: one training run with canaries, then a
statistically valid lower bound eps_lb on the epsilon of the code as it ran
(Steinke, Nasr & Jagielski, "Privacy Auditing with One (1) Training Run",
NeurIPS 2023), printed beside the accountant's eps, which is an upper bound
for the mechanism as analysed. A correct implementation gives eps_lb <= eps
except with probability 1 - confidence; eps_lb above eps means the code
leaks more than its accountant says (a bug in noise, clipping, sampling).

TARGET is a search file (its reference run, hyper-parameters at the centre
of the space), a search directory (its winner at the reference triplet, the
run `promote` would train) or a private trial config (`tan-tune train`'s).
The audit trains that run once through promote's path (Ray Train, data
parallel, micro-batches, its clipping engine and sampler) at the same
q = B/N, sigma, S, C and delta, on the base examples plus m input canaries
(noise images, randomly labelled: black box, scored by their loss) and m
gradient canaries (a clipped gradient C e_j on one weight each: white box,
scored by that weight's move), each included with probability 1/2 from a
secret draw. It guesses the r/2 highest scores in and the r/2 lowest out.
Beside eps_lb it prints the f-DP audit of the same guesses (Mahloujifar,
Melis & Chaudhuri, ICML 2025), which certifies more if the run's privacy
curve is Gaussian, as DP-SGD's nearly is; the verdict uses eps_lb alone.

What it cannot show: eps_lb is a lower bound, never a guarantee; one run
with r guesses certifies at most the printed ceiling; it sees only the
final model, and only what these canaries reveal, so a leak of other
examples (a real image among its likes) can stay below it.

By default the base examples are the test split (public data): nothing is
spent. --base private trains on the private training split: a private run,
charged to the dataset's ledger like `tan-tune train`, and only under
Poisson sampling. The audit run samples each example with probability
B_a / N_u over its universe of N_u = base + all canaries, included or not,
so nothing it prints or logs reveals how many canaries are in.

The audit is logged to MLflow (tagged tan_tune.kind=audit, in experiment
<name>-audit) with eps, eps_lb, ceiling, m, r and W per kind and the
histogram of included against excluded scores.
"""

_EXAMPLES = """\
examples:
  tan-tune audit search_spaces/digits-demo.yaml          # about a minute
  tan-tune audit runs/digits-demo --workers 2            # the search's winner
  tan-tune audit examples/train-digits.yaml --canaries 2000 --guesses 400
"""


def add_parser(commands: argparse._SubParsersAction, summary: str) -> None:
  parser = commands.add_parser(
      "audit", help=summary,
      description=_DESCRIPTION, epilog=_EXAMPLES,
  )
  parser.set_defaults(run=run, option_names={})
  parser.add_argument("target", type=pathlib.Path, metavar="TARGET",
                      help="a search file, a search directory or a private"
                      " trial config")
  parser.add_argument("--trial", metavar="TRIAL_ID",
                      help="with a search directory: this trial (default:"
                      " the best finished)")
  parser.add_argument("--canaries", type=cli_args.positive_int, default=1000,
                      help="m, canaries of each kind (default: %(default)s)")
  parser.add_argument("--guesses", type=cli_args.positive_int,
                      help="r, guesses per kind (default: m / 5)")
  parser.add_argument("--confidence", type=cli_args.probability,
                      default=0.95,
                      help="of eps_lb (default: %(default)s)")
  parser.add_argument("--base", choices=api.AUDIT_BASES,
                      default=api.PUBLIC_BASE,
                      help="train on the test split (public, free) or the"
                      " training split (private, charged); default:"
                      " %(default)s")
  parser.add_argument("--workers", type=cli_args.positive_int, default=1,
                      help="data-parallel workers (default: %(default)s)")
  parser.add_argument("--gpus-per-worker", type=cli_args.non_negative_float,
                      default=0.0, help="GPUs per worker (default: 0)")
  parser.add_argument("--address",
                      help="an existing Ray cluster (default: embedded Ray)")
  parser.add_argument("--tracking-uri",
                      default=api.DEFAULT_TRACKING_URI,
                      help="MLflow tracking URI (default: %(default)s)")
  parser.add_argument("--storage", type=pathlib.Path, default="runs",
                      help="where the audit keeps its checkpoints while it"
                      " runs (default: %(default)s)")
  parser.add_argument("--target-epsilon", type=cli_args.positive_float,
                      help="with --base private: the dataset's budget, for"
                      " its first private run in this store")
  parser.add_argument("--new-ledger", action="store_true",
                      help="with --base private: start the dataset's ledger")
  parser.add_argument("--verbose", action="store_true",
                      help=f"show Ray's output (by default it goes to"
                      f" <storage>/{LOG_FILE})")
  parser.add_argument("--json", action="store_true",
                      help="print the plan and result as JSON")


def run(args: argparse.Namespace) -> int:

  def show(plan: api.AuditPlan) -> None:
    if not args.json:
      print(render_plan(plan), flush=True)

  audited = api.audit(
      args.target, trial=args.trial, canaries=args.canaries,
      guesses=args.guesses, confidence=args.confidence, base=args.base,
      workers=args.workers, gpus_per_worker=args.gpus_per_worker,
      address=args.address, tracking_uri=args.tracking_uri,
      storage=args.storage, target_epsilon=args.target_epsilon,
      new_ledger=args.new_ledger, on_plan=show,
      verbose=args.verbose or args.json)
  print(json.dumps(audited.outcome.as_dict(), indent=2) if args.json
        else render_outcome(audited.outcome), flush=True)
  return 0


def render_plan(plan: api.AuditPlan) -> str:
  facts = plan.as_dict()
  spent = ("charged to the dataset's ledger" if plan.private
           else "public data, nothing spent")
  if plan.universe:  # Never N_a: it counts the secretly included canaries.
    size = (f"N_u = {plan.dataset_size:,} (the universe: {facts['base']}"
            " base + all canaries, included or not)")
  else:  # A fixed-size sampler, on public data only.
    size = (f"N_a = {plan.dataset_size:,} ({facts['base']} base +"
            " included canaries)")
  return "\n".join([
      f"auditing {plan.source}",
      f"  audit run: {size}, B_a ="
      f" {facts['batch_size']:,}, sigma = {facts['noise_multiplier']:.4g},"
      f" S = {facts['steps']}, C = {facts['clip_norm']:g}; {spent}",
      f"  canaries: m = {facts['canaries']} of each kind"
      f" ({', '.join(facts['kinds'])}), r = {facts['guesses']} guesses each",
  ])


def render_outcome(outcome: api.AuditOutcome) -> str:
  plan = outcome.plan
  epsilon = plan.epsilon()
  took = (f" in {console_lib.duration(outcome.seconds)}"
          if outcome.seconds is not None else "")  # None: private data.
  lines = [
      f"audit run {outcome.run_id}{took}",
      f"  eps    = {epsilon.epsilon:.3f} ({epsilon.accountant.upper()},"
      f" {plan.config.privacy.adjacency}, delta = {plan.delta:.3g}): the"
      " accountant's upper bound for this run",
  ]
  for kind, found in outcome.bounds.items():
    verdict = ("ABOVE eps: the code leaks more than its accountant says"
               if found.epsilon_lower_bound > epsilon.epsilon
               else "below eps, as a correct implementation must be")
    lines.append(
        f"  eps_lb = {found.epsilon_lower_bound:.3f} at"
        f" {found.confidence:.0%} confidence from {kind} canaries"
        f" ({found.correct} of {found.guesses} guesses right; ceiling"
        f" {found.ceiling:.2f}): {verdict}")
    lines.append(
        f"           f-DP audit of the same guesses against Gaussian curves:"
        f" {found.fdp_epsilon_lower_bound:.3f} (ceiling"
        f" {found.fdp_ceiling:.2f})")
  return "\n".join(lines)
