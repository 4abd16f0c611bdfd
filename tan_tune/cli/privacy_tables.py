"""What `tan-tune privacy` prints: `api.calculate`'s result as text tables."""

import math
from typing import Any


def render(result: dict[str, Any]) -> str:
  """The human-readable form of `api.calculate`'s result."""
  ref = result["reference"]
  lines = []
  if "calibration" in result:
    cal = result["calibration"]
    lines += [
        f"Calibrated: sigma = {cal['noise_multiplier']:.4f} spends at most"
        f" eps = {cal['target_epsilon']:g} ({cal['accountant'].upper()})",
        "",
    ]
  lines += [
      f"Reference run  N = {ref['dataset_size']:,}  B = {ref['batch_size']:,}"
      f"  sigma = {ref['noise_multiplier']:.4g}  S = {ref['steps']:,}",
      f"  q = B/N = {ref['sampling_rate']:.6g}   epochs = {ref['epochs']:.1f}",
      f"  eta = {ref['eta']:.4g}   eta_step = {ref['eta_step']:.4g}"
      f"   TAN Sigma = 1/eta = {ref['total_amount_of_noise']:.4g}",
      f"  delta = {ref['delta']:.3g}   eps_TAN = {ref['eps_tan']:.3f}"
      " (approximation, valid while sigma > 2)",
      "  accountant  epsilon  eps/eps_TAN",
  ]
  for name, eps in ref["epsilon"].items():
    lines.append(
        f"  {name.upper():<10}  {eps['epsilon']:7.3f}  {eps['eps_over_eps_tan']:.3f}"
        if math.isfinite(eps["epsilon"]) else
        f"  {name.upper():<10}  none: no finite eps (too few projections)")
  for name, reason in ref["unavailable"].items():
    lines.append(f"  {name.upper():<10}  outside what it can compute: {reason}")
  lines += [
      f"  ({ref['adjacency']} adjacency, {ref['sampling']})",
      f"  regime: {ref['regime']}: {ref['regime_explanation']}",
      "  tuning: this eps is the run's alone; a search of simulated trials"
      " is not accounted (--private-search: the price of one that is)",
  ]
  if ref["jl_floor"] is not None:
    lines.append(f"  JL floor: no accountant can certify less than eps ="
                 f" {ref['jl_floor']:.3f} at any S")
  if "samplers" in result:
    lines += _render_samplers(result["samplers"], result.get("calibration"))
  if result.get("jl"):  # The key's, not the clipping engine's, name.
    lines += _render_jl(result["jl"])
  for sim in result["simulations"]:
    lines += [
        "",
        f"Simulated at B = {sim['batch_size']:,}: sigma = {sim['noise_multiplier']:.4g},"
        f" S = {sim['steps']:,}, eta_step = {sim['eta_step']:.4g} (unchanged)",
        f"  compute saving B_ref/B = {sim['compute_saving']:.4g}x",
        f"  NOT PRIVATE: its own eps is {sim['own_epsilon_not_a_guarantee']:.4g};"
        " it predicts the reference run's accuracy, not its privacy.",
    ]
  if result["simulations"]:
    lines.append(
        "  The search is not accounted (paper section 5.2): only the"
        " reference run is."
    )
  if "private_search" in result:
    lines += _render_private_search(result["private_search"],
                                    result.get("calibration"))
  if "alternatives" in result:
    lines += ["", f"Constant-eta alternatives at sigma = {ref['noise_multiplier']:.4g}"
              " (paper section 4.3, table 3):",
              "  S          B          eps      eps_TAN  lr scale  simulated B (sigma)"]
    for alt in result["alternatives"]:
      sims = ", ".join(
          f"{s['batch_size']:,} ({s['noise_multiplier']:.3g})"
          for s in alt["simulated"]
      )
      lines.append(
          f"  {alt['steps']:<9,}  {alt['batch_size']:<9,}  {alt['epsilon']:7.3f}"
          f"  {alt['eps_tan']:7.3f}  {alt['lr_scale']:<8.4g}  {sims or '-'}"
      )
  if "dataset_scales" in result:
    lines += ["", "Dataset-size what-if, same B, sigma, S (paper table 5):",
              "  beta     N            delta      eps      eps_TAN"]
    for row in result["dataset_scales"]:
      lines.append(
          f"  {row['beta']:<7g}  {row['dataset_size']:<11,}  {row['delta']:.3g}"
          f"  {row['epsilon']:8.3f}  {row['eps_tan']:7.3f}"
      )
  return "\n".join(lines)


def _render_samplers(rows: list[dict[str, Any]],
                     calibration: dict[str, Any] | None) -> list[str]:
  target = calibration["target_epsilon"] if calibration else None
  lines = ["", "Samplers side by side (same N, B, sigma, S, delta):",
           f"  {'sampler':<23} {'max batch':>9}  {'adjacency':<15}"
           f" {'accountant':<10} {'epsilon':>9}"]
  for row in rows:
    cap = row["max_batch_size"]
    first = True
    for eps in row["epsilon"]:
      name = row["sampler"] if first else ""
      size = ("none" if cap is None else f"{cap:,}") if first else ""
      lines.append(f"  {name:<23} {size:>9}  {eps['adjacency']:<15}"
                   f" {eps['accountant'].upper():<10} {eps['epsilon']:9.4g}")
      first = False
    if row["rdp_floor"] is not None:
      lines.append(f"  {'':<23} {'':>9}  {'add/remove-one':<15}"
                   f" {'RDP floor':<10} {row['rdp_floor']:9.4g}"
                   "  (no RDP accountant can certify less)")
  lines += ["", "  sampler                  " + (
      f"sigma for eps = {target:g}   " if target else "")
            + "eps at B/2, sigma/2 (same eta) / eps"]
  for row in rows:
    sigma = row["sigma_for_target"]
    needed = (f"{sigma:<22.4f}" if sigma else f"{'not reachable':<22}"
              ) if target else ""
    ratio = row["eta_law_ratio"]
    lines.append(f"  {row['sampler']:<23}  {needed}  "
                 + ("-" if ratio is None else f"{ratio:.3f}"))
  lines += [
      "  eta law: a ratio near 1 means eps depends on eta alone, so trials",
      "  at a small batch simulate the reference run's privacy too. Poisson:",
      "  while sigma > 2. Fixed-size add/remove spends like Poisson at sigma/2,",
      "  so its law holds at twice the eta and only while sigma > 4.",
  ]
  return lines


def _render_jl(rows: list[dict[str, Any]]) -> list[str]:
  lines = ["", "JL clipping by projections r (PLD-JL; Poisson, add/remove-one):",
           f"  {'r':>5}  {'epsilon':>9}  {'floor':>9}  exact clipping (PLD)"]
  for row in rows:
    eps = row["epsilon"]
    lines.append(
        f"  {row['jl_projections']:>5}"
        f"  {(f'{eps:9.3f}' if math.isfinite(eps) else '     none')}"
        f"  {row['floor']:9.3f}  {row['exact_clipping_epsilon']:.3f}")
  lines += [
      "  none: Z_r = |g| / M has a tail P(Z_r > z) ~ z^-r, too heavy for a",
      "  finite eps at this delta; RDP is infinite at every r.",
  ]
  return lines


# The selection bounds' names, short enough for a column.
_BOUNDS = {"rdp-repeat-and-select": "RDP", "pld-selection-profile": "profile"}


def _law(search: dict[str, Any]) -> str:
  name = search["distribution"].replace("_", " ")
  return name if search["eta"] is None else f"{name} eta {search['eta']:g}"


def _render_private_search(rows: list[dict[str, Any]],
                           calibration: dict[str, Any] | None) -> list[str]:
  target = calibration["target_epsilon"] if calibration else None
  noise = rows[0]["score_noise"]
  lines = [
      "", "Private random search of the reference run (Papernot & Steinke;"
      " Poisson, add/remove-one):",
      "  K trials drawn secretly, each a private run with hyper-parameters"
      " drawn at random,",
      ("  each scored on public data" if noise is None else
       "  each scored by its count of correct validation predictions plus"
       f" Gaussian noise of std {noise:g},"),
      "  only the best released. eps of the whole search under both bounds,"
      " each of which holds:",
      "  RDP (rdp-repeat-and-select) and profile (pld-selection-profile,"
      " Koskela, Redberg & Wang);",
      "  the smaller is reported.",
  ]
  if target:
    lines += [f"  sigma: what each trial may run at for the search to spend"
              f" eps = {target:g};",
              "  trial eps: what one trial's run alone then spends (RDP), its"
              " room."]
  for row in rows:
    lines += ["", f"  mean {row['mean_trials']:g} trials: one run eps ="
              f" {row['one_run_epsilon']:.3f}; all {round(row['mean_trials'])}"
              f" released (composition) eps = {row['all_released_epsilon']:.3f}",
              f"  {'law of K':<18} {'eta':>5}  {'RDP':>8}  {'profile':>8}"
              f"  {'reported':>8}  {'bound':<7}"
              + (f"  {'sigma':>11}  {'trial eps':>9}" if target else "")]
    for search in row["searches"]:
      eta = "-" if search["eta"] is None else f"{search['eta']:g}"
      line = (f"  {search['distribution'].replace('_', ' '):<18} {eta:>5}"
              f"  {search['rdp_epsilon']:8.3f}  {search['profile_epsilon']:8.3f}"
              f"  {search['epsilon']:8.3f}  {_BOUNDS[search['accountant']]:<7}")
      if target:
        sigma = search["sigma_for_target"]
        line += (f"  {'unreachable':>11}" if sigma is None else
                 f"  {sigma:11.4f}  {search['trial_epsilon']:9.3f}")
      lines.append(line)
    if target:
      room = row["most_room"]
      lines.append(
          f"  most room per trial at eps {target:g}: " + (
              "none: no law reaches it" if room is None else
              f"{_law(room)} (sigma {room['sigma_for_target']:.4g}, one trial"
              f" alone eps {room['trial_epsilon']:.3f})"))
  return lines
