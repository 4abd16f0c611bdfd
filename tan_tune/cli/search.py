"""`tan-tune search SPACE.yaml`: the hyper-parameter search."""

import argparse
import pathlib

from tan_tune import api
from tan_tune import console
from tan_tune.cli import args as cli_args

LOG_FILE = api.SEARCH_LOG

_DESCRIPTION = """\
Search DP-SGD hyper-parameters at the TAN-equivalent small batch.

Each trial trains at a simulated triplet (B, sigma_ref * B / B_ref, S): the same
steps and per-step signal-to-noise ratio as the reference run (B_ref,
sigma_ref, S), at B_ref / B times less compute. Optuna's TPE proposes the
hyper-parameters, Ray Tune runs the trials (locally, or on a cluster with
--address), and MLflow records a parent run for the search and a nested run
per trial. Every trial goes to <storage>/<name>/leaderboard.json and the
winner to best.json there: `tan-tune promote` promotes it.

Trials are simulations and are NOT private; the search is not accounted (TAN
paper, section 5.2). Only the promoted run is. A search file may choose
otherwise (tuning_privacy): public_data runs the trials on a public dataset,
and private_random_search makes every trial a private run and the whole
search DP (Papernot & Steinke), releasing only its best trial.
"""

_EXAMPLES = """\
examples:
  tan-tune search search_spaces/digits-demo.yaml
  tan-tune search search_spaces/digits-demo.yaml --resume          # after a crash
  tan-tune search search_spaces/cifar10-wrn16-4.yaml --address auto \\
      --tracking-uri http://127.0.0.1:5000
  mlflow ui --backend-store-uri sqlite:///mlflow.db                 # inspect trials

The space file's format: docs/search-spaces.md. Your own model and data,
named by reference (model: {factory: "my_models:mlp", kwargs: {...}},
dataset: {factory: "my_data:load"}), and the same from Python
(tan_tune.api.search): docs/searching.md, "Your own model and data"; worked
examples in examples/own-cnn and examples/tabular.
"""


def add_parser(commands: argparse._SubParsersAction, summary: str) -> None:
  parser = commands.add_parser(
      "search", help=summary,
      description=_DESCRIPTION, epilog=_EXAMPLES,
  )
  parser.set_defaults(run=run, option_names={"register": "--register",
                                             "release_at": "--release-at"})
  parser.add_argument("space", type=pathlib.Path, help="the search-space YAML")
  parser.add_argument("--num-samples", type=cli_args.positive_int,
                      help="number of trials (default: the file's num_trials)")
  parser.add_argument("--max-concurrent", type=cli_args.positive_int,
                      help="trials at once (default: the file's max_concurrent)")
  parser.add_argument("--address",
                      help="an existing Ray cluster (host:port or 'auto');"
                      " default: an embedded local Ray")
  parser.add_argument("--tracking-uri",
                      default=api.DEFAULT_TRACKING_URI,
                      help="MLflow tracking URI (default: %(default)s, in the"
                      " working directory)")
  parser.add_argument("--storage", type=pathlib.Path, default="runs",
                      help="folder of search directories (default: %(default)s)")
  parser.add_argument("--resume", action="store_true",
                      help="continue the search in --storage after a crash")
  parser.add_argument("--new-ledger", action="store_true",
                      help="a private random search may start its dataset's"
                      " privacy ledger in a store that has none: say so only"
                      " if --tracking-uri is where the team's private runs on"
                      " it are recorded")
  parser.add_argument("--verbose", action="store_true",
                      help="show Ray Tune's status tables, warnings and worker"
                      f" logs as they come (by default they go to {LOG_FILE}"
                      " in the search directory, and a live view shows the"
                      " trials, the best so far and the time left)")
  parser.add_argument("--register", metavar="NAME",
                      help="a private random search only: register its"
                      " released model as a new version of NAME, made before"
                      " any trial (alias candidate once released, its privacy"
                      " card as description); `tan-tune registry NAME` lists"
                      " the versions and moves the champion")
  cli_args.add_release_at(parser, "how long a private random search took,"
                          " which counts its trials")


def run(args: argparse.Namespace) -> int:
  try:
    result = api.search(
        args.space, storage=args.storage, tracking_uri=args.tracking_uri,
        address=args.address, num_samples=args.num_samples,
        max_concurrent=args.max_concurrent, resume=args.resume,
        new_ledger=args.new_ledger, verbose=args.verbose,
        register=args.register, release_at=args.release_at)
  except (FileNotFoundError, FileExistsError) as error:
    cli_args.fail("tan-tune search", str(error))
  print(render_release(result) if result.private
        else render_leaderboard(result), flush=True)
  if result.stopped:
    cli_args.fail("tan-tune search", "the private search was stopped before"
                  " all its trials ended: nothing was released (the number"
                  " of trials is the secret draw's, not the operator's); its"
                  f" state is kept, owner-only, in {result.directory}: run the"
                  " same command with --resume to finish it", status=130)
  if result.private and not result.best:
    cli_args.fail("tan-tune search", "the private search released nothing:"
                  " no trial finished, or none was drawn; its charge stays in"
                  " the ledger", status=1)
  if not result.private and all(row["status"] == "failed"
                                for row in result.leaderboard):
    cli_args.fail("tan-tune search", "every trial failed; see the Ray logs in"
                  f" {result.directory}", status=1)
  return 0


def render_release(result: api.SearchResult) -> str:
  """A private random search: the released trial, and nothing of the rest."""
  if not result.best:
    return "nothing released"
  best = result.best
  test = best["test_accuracy"].get(result.metric, best["value"])
  chosen_on = ("chosen by its DP score on private validation; the test split"
               " measured this model alone"
               if best.get("select_on") == "validation"
               else "chosen on that split: optimistic")
  return "\n".join([
      f"released: {result.metric} {test:.4f} on the test split ({chosen_on}),"
      f" {api.format_params(best['params'])}",
      f"  {best['epsilon']['describe']} for the whole search",
      f"  weights: {result.directory / api.RELEASED_MODEL_FILE}; MLflow run"
      f" {result.parent_run_id}",
      *([f"  registered: {result.registered[0]} version"
         f" {result.registered[1]}, alias candidate, its privacy card as"
         " description"] if result.registered else []),
      "  (a private random search: the number of trials and the others'"
      " results are not shown; the search's duration counts them, so"
      " publish at a time fixed in advance (--release-at), not now)",
  ])


def render_leaderboard(result: api.SearchResult) -> str:
  metric = result.metric
  lines = [f"{'rank':<5} {'trial':<18} {'status':<9} {metric:>18}"
           f" {'reference C':>14} {'~time':>7}  params"]
  for rank, row in enumerate(result.leaderboard, 1):
    value = "-" if row[metric] is None else f"{row[metric]:.4f}"
    params = api.format_params(row["params"])
    cost = f"{row['reference_examples']:,}{'*' if row['front'] else ' '}"
    seconds = row["reference_seconds"]
    time = "-" if seconds is None else console.duration(seconds)
    lines.append(f"{rank:<5} {row['trial_id']:<18} {row['status']:<9}"
                 f" {value:>18} {cost:>14} {time:>7}  {params}")
  lines.append("(reference C = B'_ref S K, the example passes of the run each"
               " trial stands for, * on the front of score against C; ~time"
               " at the trial's own throughput)")
  lines.append("")
  lines.append(f"search directory: {result.directory}")
  lines.append(f"MLflow parent run: {result.parent_run_id} (its plots/: Optuna's"
               " history, importances, parallel coordinates, learning curves,"
               " the front of score against compute)")
  lines.append("Optuna study: optuna-dashboard"
               f" {api.study_storage(result.directory)}")
  lines.append("MLflow: " + api.how_to_view(result.tracking_uri,
                                            result.experiment_id))
  if result.best:
    lines.append(f"winner: {result.best['trial_id']} -> "
                 f"{result.directory / api.BEST_FILE}")
    lines.append("Trials are simulations and NOT private; promote the winner"
                 " to the reference run for a privacy guarantee.")
  return "\n".join(lines)
