"""End-to-end tests of `tan-tune privacy`, in-process and as a real command."""

import json
import math
import subprocess
import sys

import pytest

from tan_tune.cli import main as cli
from tan_tune.cli import privacy_tables

IMAGENET = [
    "--dataset-size", "1281167", "--batch-size", "16384", "--sigma", "2.5",
    "--steps", "72000",
]


def run(capsys, *argv):
  code = cli.main(["privacy", *argv])
  return code, capsys.readouterr().out


def test_prints_the_tan_quantities_and_every_accountant(capsys):
  code, out = run(capsys, *IMAGENET, "--delta", "8e-7")
  assert code == 0
  for words in ("q = B/N = 0.0127883", "eta =", "eps_TAN", "RDP", "PRV", "PLD",
                "add/remove-one", "regime: TAN regime"):
    assert words in out
  assert "7.954" in out  # Table 4: 7.97.


def test_json_has_the_same_content(capsys):
  code, out = run(capsys, *IMAGENET, "--simulate-batch-size", "128", "--json")
  assert code == 0
  result = json.loads(out)
  reference = result["reference"]
  assert reference["sampling_rate"] == pytest.approx(16384 / 1281167)
  assert set(reference["epsilon"]) == {"rdp", "prv", "pld"}
  assert reference["regime"] == "TAN regime"
  [simulation] = result["simulations"]
  assert simulation["compute_saving"] == 128
  assert simulation["noise_multiplier"] == pytest.approx(2.5 / 128)
  assert simulation["private"] is False


def test_simulation_says_it_is_not_private(capsys):
  _, out = run(capsys, *IMAGENET, "--simulate-batch-size", "128")
  assert "compute saving B_ref/B = 128x" in out
  assert "NOT PRIVATE" in out
  assert "The search is not accounted" in out


CIFAR_REFERENCE = ["--dataset-size", "50000", "--batch-size", "4096",
                   "--sigma", "3", "--steps", "2500", "--delta", "1e-5"]


def test_every_eps_says_whether_the_search_is_accounted(capsys):
  _, out = run(capsys, *CIFAR_REFERENCE)
  assert "a search of simulated trials is not accounted" in out


def test_the_price_of_a_private_random_search(capsys):
  # Papernot & Steinke (ICLR 2022) for 10 expected trials, RDP / privacy
  # profile: geometric 11.854 / 9.422, Poisson 14.511 / 11.853; 29.84
  # composed. Each search reports the smaller bound and names it.
  _, out = run(capsys, *CIFAR_REFERENCE, "--private-search", "10",
               "--target-epsilon", "8", "--trial-shapes", "1,-0.5", "--json")
  result = json.loads(out)
  [row] = result["private_search"]
  searches = {(s["distribution"], s["eta"]): s for s in row["searches"]}
  assert list(searches) == [("negative_binomial", -0.5), ("geometric", 1),
                            ("poisson", None)]
  assert (searches["geometric", 1]["rdp_epsilon"],
          searches["geometric", 1]["profile_epsilon"]) == pytest.approx(
              (11.854, 9.422), abs=2e-3)
  assert searches["poisson", None]["profile_epsilon"] == pytest.approx(
      11.853, abs=2e-3)
  assert row["all_released_epsilon"] == pytest.approx(29.84, abs=0.05)
  for search in searches.values():
    bounds = {"rdp-repeat-and-select": search["rdp_epsilon"],
              "pld-selection-profile": search["profile_epsilon"]}
    assert search["epsilon"] == min(bounds.values())
    assert bounds[search["accountant"]] == search["epsilon"]
    # Each trial spends less alone than the whole search.
    assert search["trial_epsilon"] < 8
  # The most room: the smallest sigma, the largest eps of one trial alone.
  sigmas = [s["sigma_for_target"] for s in searches.values()]
  room = row["most_room"]
  assert room["sigma_for_target"] == min(sigmas)
  assert room["trial_epsilon"] == max(s["trial_epsilon"]
                                      for s in searches.values())
  assert (room["distribution"], room["eta"]) == ("negative_binomial", -0.5)
  text = privacy_tables.render(result)
  assert "only the best released" in text and "each scored on public data" in (
      text)
  assert (f"most room per trial at eps 8: negative binomial eta -0.5 (sigma"
          f" {room['sigma_for_target']:.4g}, one trial alone eps"
          f" {room['trial_epsilon']:.3f})") in text
  table = [line.split() for line in text.splitlines()
           if line.startswith(("  negative binomial", "  geometric",
                               "  poisson "))]
  assert [float(line[-2]) for line in table] == pytest.approx(sigmas)


def test_the_scores_noise_raises_the_price_of_a_search(capsys):
  _, out = run(capsys, *CIFAR_REFERENCE, "--private-search", "10",
               "--trial-shapes", "0", "--score-noise", "20")
  assert "plus Gaussian noise of std 20" in out
  rows = [line.split() for line in out.splitlines()
          if line.startswith(("  logarithmic", "  poisson "))]
  eps = {row[0]: (float(row[2]), float(row[3])) for row in rows}
  # Above the public-data search's 10.592 / 8.945 and 14.511 / 11.853.
  assert all(a > b for a, b in zip(eps["logarithmic"], (10.592, 8.945)))
  assert all(a > b for a, b in zip(eps["poisson"], (14.511, 11.853)))


def test_a_private_search_is_priced_for_poisson_exact_clipping_only(capsys):
  with pytest.raises(SystemExit) as exit_info:
    run(capsys, *CIFAR_REFERENCE, "--private-search", "10", "--sampling",
        "fixed")
  assert exit_info.value.code == 2
  assert "--private-search is accounted for --sampling poisson" in (
      capsys.readouterr().err)


@pytest.mark.slow
def test_target_epsilon_calibrates_sigma(capsys):
  argv = ["--dataset-size", "1281167", "--batch-size", "16384", "--steps",
          "72000", "--target-epsilon", "8", "--json"]
  _, out = run(capsys, *argv)
  result = json.loads(out)
  sigma = result["calibration"]["noise_multiplier"]
  assert result["reference"]["noise_multiplier"] == sigma
  assert result["reference"]["epsilon"]["rdp"]["epsilon"] <= 8


def test_steps_grid_prints_constant_eta_alternatives(capsys):
  _, out = run(capsys, *IMAGENET, "--steps-grid", "9000,18000,72000,288000",
               "--simulate-batch-size", "256", "--json")
  rows = {row["steps"]: row for row in json.loads(out)["alternatives"]}
  assert rows[18000]["batch_size"] == 32768
  assert rows[18000]["lr_scale"] == 4
  assert rows[18000]["simulated"][0]["batch_size"] == 512


def test_dataset_scales(capsys):
  _, out = run(capsys, *IMAGENET, "--dataset-scales", "0.5,2", "--json")
  rows = json.loads(out)["dataset_scales"]
  assert [row["dataset_size"] for row in rows] == [640584, 2562334]
  assert rows[0]["epsilon"] > rows[1]["epsilon"]


@pytest.mark.slow
def test_plot_writes_a_png(tmp_path, capsys):
  out = tmp_path / "wall.png"
  code = cli.main(["privacy", "plot", "--out", str(out), "--steps-grid",
                   "1000,4000", "--dataset-size", "50000"])
  assert code == 0
  assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


CIFAR = ["--dataset-size", "50000", "--batch-size", "4096", "--sigma", "3",
         "--steps", "2500", "--delta", "1e-5"]


@pytest.mark.slow
def test_samplers_side_by_side_with_their_adjacencies(capsys):
  code, out = run(capsys, *CIFAR, "--sampling",
                  "poisson,truncated-poisson,fixed,fixed-with-replacement",
                  "--json")
  assert code == 0
  rows = {row["sampler"]: row for row in json.loads(out)["samplers"]}
  eps = {name: {(e["adjacency"], e["accountant"]): e["epsilon"]
                for e in row["epsilon"]} for name, row in rows.items()}
  # The note's figures: Poisson PLD 6.580, truncated at 4352 6.581, FSwoR
  # add/remove 18.55 and replace-one 35.6, Wang et al. 47.40.
  assert eps["poisson"][("add/remove-one", "pld")] == pytest.approx(6.58,
                                                                    abs=0.01)
  assert rows["truncated-poisson"]["max_batch_size"] == 4352
  assert eps["truncated-poisson"][("add/remove-one", "pld")] == (
      pytest.approx(6.581, abs=0.01))
  assert eps["fixed"][("add/remove-one", "rdp")] == pytest.approx(18.55,
                                                                  abs=0.01)
  assert eps["fixed"][("replace-one", "rdp-wang")] == pytest.approx(47.40,
                                                                    abs=0.01)
  # With replacement at B = 4096 RDP is useless, and provably so.
  assert rows["fixed-with-replacement"]["rdp_floor"] > 1e6


def test_sigma_for_a_target_and_the_eta_law_per_sampler(capsys):
  code, out = run(capsys, *CIFAR, "--target-epsilon", "8",
                  "--sampling", "poisson,fixed")
  assert code == 0
  assert "Samplers side by side" in out and "sigma for eps = 8" in out
  rows = [line.split() for line in out.splitlines()
          if line.strip().startswith(("poisson ", "fixed "))
          and len(line.split()) == 3]
  sigmas = {name: float(sigma) for name, sigma, _ in rows}
  ratios = {name: float(ratio) for name, _, ratio in rows}
  assert sigmas["fixed"] > 1.9 * sigmas["poisson"]  # About twice the noise.
  # At sigma = 3 -> 1.5 Poisson stays near the eta law; fixed-size batches,
  # which spend like Poisson at sigma / 2, fall off it.
  assert ratios["poisson"] < 1.2 < ratios["fixed"]


@pytest.mark.slow
def test_jl_clipping_by_projections_beside_exact_clipping_and_the_floor(
    capsys):
  argv = ["privacy", "--dataset-size", "1437", "--batch-size", "512",
          "--sigma", "3.918", "--steps", "40", "--clipping", "jl",
          "--jl-projections", "4,32"]
  assert cli.main(argv + ["--json"]) == 0
  result = json.loads(capsys.readouterr().out)
  reference = result["reference"]
  assert list(reference["epsilon"]) == ["pld-jl"]  # Never RDP.
  assert reference["jl_projections"] == 4
  assert math.isinf(reference["epsilon"]["pld-jl"]["epsilon"])
  r4, r32 = result["jl"]
  assert math.isinf(r4["epsilon"]) and r4["floor"] > r32["floor"] > 0
  assert r32["exact_clipping_epsilon"] < r32["epsilon"] < 2.2
  assert cli.main(argv) == 0
  out = capsys.readouterr().out
  assert "PLD-JL      none: no finite eps" in out
  assert "JL clipping with 4 projections" in out
  assert f"{r32['epsilon']:9.3f}" in out


@pytest.mark.slow
def test_plot_draws_a_wall_per_sampler(tmp_path, capsys):
  out = tmp_path / "walls.png"
  code = cli.main(["privacy", "plot", "--out", str(out), "--steps-grid",
                   "1000", "--dataset-size", "50000", "--sampling",
                   "poisson,fixed"])
  assert code == 0
  assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


BAD_INPUTS = [
    (["--batch-size", "abc"], "--batch-size", "not a number"),
    (["--batch-size", "0"], "--batch-size", "positive integer"),
    (["--sigma", "-1"], "--sigma", "number > 0"),
    (["--steps", "2.5"], "--steps", "positive integer"),
    (["--delta", "1"], "--delta", "(0, 1)"),
    (["--batch-size", "2000000"], "--batch-size", "at most the dataset size"),
    (["--target-epsilon", "0.0001"], "--target-epsilon", "no sigma in"),
    (["--simulate-batch-size", "20000"], "--simulate-batch-size", "at most B_ref"),
    (["--steps-grid", "10"], "--steps-grid", "needs B"),
    (["--sampling", "poisson,shuffle"], "--sampling", "expected samplers"),
    (["--sampling", "truncated-poisson", "--accountant", "rdp"],
     "--accountant", "accounted by pld"),
    (["--jl-projections", "10"], "--jl-projections", "--clipping jl"),
    (["--clipping", "jl", "--jl-projections", "10", "--accountant", "rdp"],
     "--accountant", "RDP is infinite"),
    (["--clipping", "jl", "--jl-projections", "10", "--sampling", "fixed"],
     "--sampling", "poisson sampling under add/remove-one adjacency only"),
    (["--private-search", "10", "--score-noise", "0"], "--score-noise",
     "'0' is not allowed; expected a number > 0"),
    (["--private-search", "10", "--score-noise", "abc"], "--score-noise",
     "not a number"),
    (["--score-noise", "20"], "--score-noise", "goes with --private-search"),
    (["--private-search", "10", "--trial-shapes", "0,-1"], "--trial-shapes",
     "'-1' is not allowed; expected a number eta > -1"),
    (["--private-search", "10", "--trial-shapes", "abc"], "--trial-shapes",
     "'abc' is not allowed; expected a number eta > -1"),
    (["--private-search", "10", "--trial-shapes", "inf"], "--trial-shapes",
     "a number eta > -1"),
]


def _argv_with(override):
  argv = dict(zip(IMAGENET[::2], IMAGENET[1::2]))
  argv.update(zip(override[::2], override[1::2]))
  return ["privacy", *(item for pair in argv.items() for item in pair)]


@pytest.mark.parametrize("override, option, allowed", BAD_INPUTS)
def test_bad_input_is_one_line_and_exit_2(override, option, allowed, capsys):
  with pytest.raises(SystemExit) as exit_info:
    cli.main(_argv_with(override))
  assert exit_info.value.code == 2
  captured = capsys.readouterr()
  assert captured.out == ""
  lines = captured.err.strip().splitlines()
  assert len(lines) == 1, captured.err
  assert option in lines[0] and allowed in lines[0]


@pytest.mark.e2e
@pytest.mark.parametrize("override", [["--batch-size", "abc"],
                                      ["--batch-size", "2000000"]])
def test_bad_input_in_a_real_process_has_no_traceback(override):
  result = subprocess.run(
      [sys.executable, "-m", "tan_tune.cli", *_argv_with(override)],
      capture_output=True, text=True, check=False,
  )
  assert result.returncode == 2
  assert result.stdout == ""
  assert "Traceback" not in result.stderr
  assert len(result.stderr.strip().splitlines()) == 1


def test_missing_required_option(capsys):
  with pytest.raises(SystemExit) as exit_info:
    cli.main(["privacy", "--dataset-size", "1000", "--batch-size", "10"])
  assert exit_info.value.code == 2
  assert "--steps is required" in capsys.readouterr().err


def test_an_extreme_setting_answers_and_says_which_accountants_cannot(capsys):
  argv = ["privacy", "--dataset-size", "1000", "--batch-size", "10",
          "--sigma", "0.3", "--steps", "1000000"]
  assert cli.main(argv) == 0
  out = capsys.readouterr().out
  assert "RDP" in out
  assert out.count("outside what it can compute: its grid would need") == 2
  with pytest.raises(SystemExit) as exit_info:
    cli.main(argv + ["--accountant", "pld", "--dataset-scales", "2"])
  assert exit_info.value.code == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "PLD accountant: outside what it can compute" in (
      err[0])
