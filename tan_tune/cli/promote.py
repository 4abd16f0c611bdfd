"""`tan-tune promote`: the search's winner as one private reference run."""

import argparse
import json
import pathlib

from tan_tune import api
from tan_tune.cli import args as cli_args

LOG_FILE = api.PROMOTE_LOG

_DESCRIPTION = """\
Promote a searched configuration to the reference run (B_ref, sigma_ref, S).

The trial's hyper-parameters move from the simulated batch B to B_ref, with
sigma_ref and the same S (for a trial that searched S at constant eta, that
triplet's reference and lr scaling). Before anything runs, a privacy gate
computes eps with the default accountant of the search file's sampler
(RDP for Poisson sampling at q = B_ref / N, add/remove-one) and refuses when
eps exceeds the target or sigma_ref < 2, and the privacy ledger refuses when
what the same dataset has already spent (any search, any trial, any earlier
attempt, whatever became of its MLflow runs), composed with this run, would
exceed the budget. The ledger is the tracking store's: the dataset's first
private run in a store needs --new-ledger, so that a wrong --tracking-uri
does not start an empty ledger beside the team's. The run then trains on Ray
Train with --workers data-parallel workers on the whole training set, logs
to MLflow beside the search (tagged promoted, linked to the search and the
source trial), and reports test accuracy and the final eps for every
accountant.

This run, not the search, is what the privacy guarantee is about: the
search's trials were simulations and are not charged to the budget. Its
sampling and noise are seeded secretly from the OS, it publishes only its
weights, held-out accuracy and epsilon, and its checkpoints are deleted when
it finishes. A trial is promoted at most once, even if its MLflow run was
deleted; running the same command after a crash resumes it.

exit status: 0 done, 1 the run failed, 2 bad input (a store without the
search, or without the dataset's ledger and no --new-ledger), 3 refused by
the privacy gate, the ledger, or because the trial was already promoted.
"""

_EXAMPLES = """\
examples:
  tan-tune promote runs/digits-demo --plan              # what would run, eps, cost
  tan-tune promote runs/digits-demo --calibrate --workers 2 --new-ledger
  tan-tune promote --mlflow-run 3f2c... --tracking-uri http://127.0.0.1:5000 \\
      --workers 8 --gpus-per-worker 1 --address auto
"""


def add_parser(commands: argparse._SubParsersAction, summary: str) -> None:
  parser = commands.add_parser(
      "promote", help=summary,
      description=_DESCRIPTION, epilog=_EXAMPLES,
  )
  parser.set_defaults(run=run, option_names={
      "max_physical_batch": "--max-physical-batch", "register": "--register",
      "release_at": "--release-at"})
  source = parser.add_mutually_exclusive_group(required=True)
  source.add_argument("search_dir", nargs="?", type=pathlib.Path,
                      metavar="SEARCH_DIR",
                      help="a search directory, e.g. runs/digits-demo")
  source.add_argument("--mlflow-run", metavar="PARENT_RUN_ID",
                      help="the search's MLflow parent run instead")
  parser.add_argument("--trial", metavar="TRIAL_ID",
                      help="promote this trial (default: the best finished)")
  parser.add_argument("--plan", action="store_true",
                      help="print the plan and start nothing")
  parser.add_argument("--workers", type=cli_args.positive_int, default=1,
                      help="data-parallel workers (default: %(default)s)")
  parser.add_argument("--gpus-per-worker", type=cli_args.non_negative_float,
                      help="GPUs per worker (default: 1 if the search's"
                      " trials used GPUs, else 0)")
  parser.add_argument("--max-physical-batch", type=cli_args.positive_int,
                      help="largest micro-batch per worker (default: the"
                      " search file's); memory, not maths")
  parser.add_argument("--target-epsilon", type=cli_args.positive_float,
                      help="a budget tighter than the search file's")
  parser.add_argument("--new-ledger", action="store_true",
                      help="start the dataset's privacy ledger in this"
                      " store: its first private run here (refused without"
                      " it when the store has no ledger entry for the"
                      " dataset; no effect once it has one)")
  parser.add_argument("--calibrate", action="store_true",
                      help="first train the winner at B_ref/64, /32, /16 to"
                      " fit accuracy against B and predict B_ref")
  parser.add_argument("--calibration-seeds", type=cli_args.positive_int,
                      default=1, metavar="K",
                      help="with --calibrate, K runs at each batch size with"
                      " different seeds: their scatter is measured and the"
                      " interval narrows, at 7/64 of the reference run's"
                      " compute per set (default: %(default)s)")
  parser.add_argument("--address",
                      help="an existing Ray cluster (default: embedded Ray)")
  parser.add_argument("--tracking-uri",
                      help="MLflow tracking URI (default: the search's; with"
                      f" --mlflow-run, {api.DEFAULT_TRACKING_URI})")
  parser.add_argument("--storage", type=pathlib.Path, default="runs",
                      help="with --mlflow-run, where promotions keep their"
                      " state: <storage>/<search name> (default: %(default)s)")
  parser.add_argument("--verbose", action="store_true",
                      help="show Ray's and Ray Train's output as it comes (by"
                      f" default it goes to {LOG_FILE} in the promotion's"
                      " directory, and a live view shows steps, eps spent and"
                      " accuracy at each evaluation)")
  parser.add_argument("--register", metavar="NAME",
                      help="register the run's MLflow Model as a new version"
                      " of NAME (alias candidate once it finishes, its"
                      " privacy card as description); `tan-tune registry"
                      " NAME` lists the versions and moves the champion")
  cli_args.add_release_at(parser, "how long the run took (the plan's"
                          " estimated wall time says about how long)")
  parser.add_argument("--json", action="store_true",
                      help="print the plan and result as JSON")


def run(args: argparse.Namespace) -> int:
  prog = "tan-tune promote"
  if args.calibration_seeds > 1 and not args.calibrate:
    cli_args.fail(prog, f"--calibration-seeds: {args.calibration_seeds} needs"
                  " --calibrate (the seeds are the calibration runs')")

  def show(plan: api.PromotionPlan) -> None:
    if args.json and args.plan:
      print(json.dumps(plan.as_dict(), indent=2, default=str))
    elif not args.json:
      print(render_plan(plan), flush=True)

  try:
    promoted = api.promote(
        args.search_dir, mlflow_run=args.mlflow_run,
        tracking_uri=args.tracking_uri, storage=args.storage,
        trial=args.trial, workers=args.workers,
        gpus_per_worker=args.gpus_per_worker,
        max_physical_batch=args.max_physical_batch,
        target_epsilon=args.target_epsilon, calibrate=args.calibrate,
        calibration_seeds=args.calibration_seeds, new_ledger=args.new_ledger,
        address=args.address, plan_only=args.plan, on_plan=show,
        verbose=args.verbose, announce_log=not args.json,
        register=args.register, release_at=args.release_at)
  except api.PromotionRefused as refusal:
    cli_args.fail(prog, f"refused: {refusal}", status=3)
  except api.PromotionFailed as failure:
    cli_args.fail(prog, str(failure), status=1)
  plan, result = promoted.plan, promoted.result
  if result is None:
    return 0
  print(json.dumps({"plan": plan.as_dict(), "result": {
      "run_id": result.run_id,
      "directory": str(result.directory),
      "metrics": result.metrics,
      "privacy": result.privacy.as_dict(),
      "scaling_law": result.scaling,
      "model": str(result.model_path),
      "registered": result.registered,
  }}, indent=2, default=str) if args.json else render_result(plan, result),
        flush=True)
  return 0


_CHOSEN_BY = {
    "backtest": "the smallest backtest error",
    "default": (f"fewer than {api.MIN_BATCH_SIZES_TO_CHOOSE} batch"
                " sizes cannot choose: the law that predicted the recorded"
                " promotions best"),
    "asked": "as asked",
}


def _error(value: float | None) -> str:
  return "n/a, too few points" if value is None else f"{value:.4f}"


def _duration(seconds: float) -> str:
  hours, rest = divmod(int(round(seconds)), 3600)
  minutes, seconds = divmod(rest, 60)
  return f"{hours}h{minutes:02d}m{seconds:02d}s" if hours else (
      f"{minutes}m{seconds:02d}s")


def _render_peak(plan: api.PromotionPlan) -> str:
  peak = plan.peak_batch()
  bound = (f"at most {peak['peak_examples']:,} examples a step (the sampler's"
           " cap)" if peak["max_batch_size"] else
           f"not capped (Poisson): {peak['peak_examples']:,} = B + 4 sqrt(B)"
           " is passed in about 3 steps in 100,000; sampling:"
           " truncated-poisson caps it at almost no eps")
  return (f"batches: {bound}; {peak['per_worker']:,} per worker, in"
          f" micro-batches of {peak['micro_batch_rows']:,} rows (K copies"
          f" included; {peak['micro_batch_input_mib']:.3g} MiB of input"
          " each, activations scale with it)")


def render_plan(plan: api.PromotionPlan) -> str:
  t = plan.triplet
  metric = plan.outcome.space.metric
  sim = plan.record.simulated
  lines = [
      f"promote trial {plan.trial['trial_id']} of search"
      f" {plan.outcome.space.name} ({metric} = {plan.trial[metric]:.4f} at"
      f" the simulated B = {sim.batch_size}, sigma ="
      f" {sim.noise_multiplier:.4g}; not private)",
      f"reference run: N = {t.dataset_size}, B = {t.batch_size}, sigma ="
      f" {t.noise_multiplier:g}, S = {t.steps} (q = {t.sampling_rate:.4g},"
      f" {t.epochs:.1f} epochs, eta = {t.eta:.4g}); lr ="
      f" {plan.config.optim.lr:.4g} (x{plan.record.lr_scale:.3g} for S)",
      f"privacy at delta = {plan.privacy.delta:.3g},"
      f" {plan.privacy.epsilon.adjacency} adjacency,"
      f" {plan.privacy.epsilon.sampling}:",
  ]
  for name, report in plan.privacy.epsilons.items():
    marker = "  <- the gate" if report is plan.privacy.epsilon else ""
    lines.append(f"  eps ({name.upper()}) = {report.epsilon:.4f}{marker}")
  lines.append(f"  eps_TAN = {plan.privacy.eps_tan:.4f}; target ="
               f" {plan.target_epsilon:g}: within budget")
  lines.append(f"  tuning ({plan.outcome.space.tuning_privacy}):"
               f" {plan.tuning_guarantee}")
  lines.extend(render_ledger(plan))
  lines.append(_render_peak(plan))
  lines.append(f"MLflow Model: {plan.served.describe()}")
  lines.append(f"front end: {plan.front_end}")
  budget = plan.outcome.space.compute_budget
  lines.append(
      f"compute: C = B S K = {plan.record.reference_examples:,} example"
      f" passes{f' (budget {budget.examples:,.0f})' if budget else ''},"
      f" {plan.compute_vs_trial:.3g}x one trial; {plan.workers} worker(s),"
      f" {plan.gpus_per_worker:g} GPU each")
  lines.extend(render_time(plan))
  score = plan.trial[metric]
  lines.append(
      f"the winner's search score {score:.4f} (on {plan.outcome.space.select_on},"
      " the best of the search: optimistic, left out of any fit)")
  warning = api.select_on_test_warning(plan.outcome.space)
  if warning:
    lines.append(f"warning: {warning}")
  if plan.scaling:
    summary = plan.scaling.as_dict(t.batch_size)
    low, high = summary["interval"]
    band = (f", {summary['interval_level']:.0%} interval [{low:.4f},"
            f" {high:.4f}]")
    lines.append(
        f"predicted {metric} at B = {t.batch_size}:"
        f" {summary['predicted_accuracy']:.4f}{band}, by the"
        f" {summary['law']} law ({_CHOSEN_BY[summary['chosen_by']]}; runs"
        " not selected for their score)")
    lines.append("  laws, by leave-one-out backtest error: " + "; ".join(
        f"{law['law']} {law['predicted_accuracy']:.4f}"
        f" (error {_error(law['backtest_error'])})"
        for law in summary["laws"]))
    lines.append(
        "  the interval: from no gain beyond the largest point to the"
        " 1/sqrt(B) law, widened by one run's noise (binomial on"
        f" {plan.held_out_size:,} held-out examples and the calibration"
        " runs' scatter)")
  else:
    lines.append(
        f"predicted {metric}: no fit (no unselected run at two batch sizes)."
        " TAN (section 3.4, figure 4) finds accuracy constant or falling with"
        " B at constant eta_step: expect at most about the winner's score."
        " --calibrate fits it.")
  if plan.calibration:
    batches = [c[api.SIMULATION_BATCH_SIZE] for c in plan.calibration]
    seeds = plan.calibration_seeds
    lines.append(
        f"calibration first: the winner at simulation batch sizes {batches}"
        + (f", {seeds} seeds each" if seeds > 1 else "")
        + f" (same S, not private): {plan.calibration_vs_reference:.3g}x the"
        " reference run's examples")
  return "\n".join(lines)


def render_time(plan: api.PromotionPlan) -> list[str]:
  """The estimated wall time and its pieces."""
  if plan.time is None:
    return ["estimated wall time: none (the workers train on GPUs and this"
            " machine has none to time a step on)"]
  t = plan.time
  lines = [
      f"estimated wall time: {_duration(t.total_seconds)} = start-up"
      f" {_duration(t.ray_start_seconds + t.train_start_seconds)} +"
      + (f" features once {_duration(t.features_seconds)} +"
         if t.features_seconds else "")
      + f" {t.steps} steps x {t.step_seconds:.3g} s + {t.evaluations}"
      f" evaluations x {t.evaluation_seconds:.3g} s + finish"
      f" {_duration(t.finish_seconds)} (timed on a synthetic twin: one"
      f" worker's {t.per_worker_batch:,} examples a step, {t.threads}"
      f" thread(s) on {t.device}; Ray's start-up as measured on the"
      " project's machine)"]
  alone = t.one_worker_seconds
  if alone is not None:
    lines.append(
        f"  on one worker: {_duration(alone)}"
        + (" (sooner: these workers slow each other on this machine's cores;"
           " --workers 1)" if alone < t.total_seconds else ""))
  if plan.calibration_seconds is not None:
    lines.append(
        f"  before it, calibration: {_duration(plan.calibration_seconds)} of"
        " one worker's compute at the trial's throughput, split over the"
        " free workers")
  return lines


def render_served(plan: api.PromotionPlan,
                  result: api.PromotionResult) -> list[str]:
  """Where the MLflow Model and its card are, and the next commands."""
  served = plan.served
  uri = plan.outcome.tracking_uri
  model = (f"models:/{result.registered[0]}@candidate" if result.registered
           else f"runs:/{result.run_id}/{api.SERVED_MODEL_FOLDER}")
  lines = [f"MLflow Model: {model} ({served.weights} weights, those of"
           f" {served.metric}; raw inputs of shape"
           f" {list(served.inputs.shape)} to class probabilities), privacy"
           f" card {api.PRIVACY_CARD_FILE} on the run"]
  if result.registered:
    name, version = result.registered
    lines.append(f"registered: {name} version {version}, alias candidate")
  lines += [
      "next:",
      f"  load:  MLFLOW_TRACKING_URI={uri} python -c \"import mlflow;"
      f" print(mlflow.pyfunc.load_model('{model}'))\"",
      f"  serve: MLFLOW_TRACKING_URI={uri} mlflow models serve -m {model}"
      " --env-manager local --host 127.0.0.1 --port 5001",
      f"  card:  tan-tune registry {result.registered[0]} --card"
      f" {result.registered[1]} --tracking-uri {uri}" if result.registered
      else f"  card:  MLFLOW_TRACKING_URI={uri} mlflow artifacts download -r"
      f" {result.run_id} -a {api.PRIVACY_CARD_FILE} -d ."]
  return lines


def render_ledger(plan: api.PromotionPlan) -> list[str]:
  """The dataset's privacy ledger with this run added."""
  composition = plan.ledger
  entry = plan.ledger_entry
  ledger_of = f"privacy ledger of {entry.dataset_name}" + (
      f" (ledger {plan.ledger_id})" if plan.ledger_id else "")
  uri = plan.outcome.tracking_uri
  if not plan.dataset_in_ledger and plan.new_ledger:
    return [f"{ledger_of}: no earlier private run in {uri}; --new-ledger"
            " starts the dataset's ledger there, this run the first charge"]
  if not plan.dataset_in_ledger:
    return [
        f"{ledger_of}: no earlier private run in {uri}",
        f"warning: {uri} has no ledger entry for {entry.dataset_name}. If it"
        f" is where the team's private runs on {entry.dataset_name} are"
        " recorded and none was run before, pass --new-ledger to start its"
        " ledger; otherwise point --tracking-uri at the store that holds"
        " them. Promote charges nothing without one or the other"]
  if not composition.earlier:
    return [f"{ledger_of}: no earlier private run; this one is the first"
            " charge"]
  return [
      f"{ledger_of}: {len(composition.earlier)} earlier private run(s), eps ="
      f" {composition.spent.epsilon:.4f}; with this run eps ="
      f" {composition.total.epsilon:.4f} <= budget {composition.budget:g}"
      f" ({composition.total.accountant.upper()} composition at delta ="
      f" {composition.delta:.3g})"]


def render_result(plan: api.PromotionPlan,
                  result: api.PromotionResult) -> str:
  metrics = result.metrics
  lines = ["", "promoted run finished (private):"]
  for key in ("accuracy", "ema_accuracy", "augtest_accuracy"):
    if key in metrics:
      lines.append(f"  {key} = {metrics[key]:.4f}")
  for report in result.privacy.epsilons.values():
    lines.append(f"  {report.describe()}")
  lines.append(f"  {plan.tuning_guarantee}")
  if result.scaling:
    lines.append(
        f"  predicted {plan.outcome.space.metric}"
        f" {result.scaling['predicted_accuracy']:.4f} (90% interval"
        f" [{result.scaling['interval'][0]:.4f},"
        f" {result.scaling['interval'][1]:.4f}]), actual"
        f" {result.scaling['actual']:.4f}")
  lines.append(f"MLflow run: {result.run_id} (tagged promoted, beside search"
               f" run {plan.outcome.parent_run_id})")
  lines.append(f"weights: {result.model_path}")
  lines.extend(render_served(plan, result))
  lines.append("MLflow: " + api.how_to_view_run(plan.outcome.tracking_uri,
                                                result.run_id))
  return "\n".join(lines)
