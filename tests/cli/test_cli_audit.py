"""Tests of `tan-tune audit`."""

import re

import pytest

from tan_tune.cli import main as cli

pytestmark = pytest.mark.e2e

DEMO = "search_spaces/digits-demo.yaml"


def _options(tmp_path):
  return ["--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db",
          "--storage", str(tmp_path / "runs")]


def test_the_demo_audit_prints_eps_beside_eps_lb_and_its_confidence(
    tmp_path, capsys, local_ray):
  assert cli.main(["audit", DEMO, "--canaries", "300",
                   *_options(tmp_path)]) == 0
  out = capsys.readouterr().out
  assert "auditing the reference run of search_spaces/digits-demo.yaml" in out
  assert "public data, nothing spent" in out
  # The demo's eps = 2, up to the rounding of the audit run's B_a.
  eps = re.search(r"eps    = (\d\.\d{3}) \(RDP, add/remove-one, delta = ", out)
  assert eps and abs(float(eps[1]) - 2) < 0.05, out
  for kind in ("input", "gradient"):
    line = re.search(rf"eps_lb = (\S+) at 95% confidence from {kind} canaries"
                     r" \((\d+) of 60 guesses right; ceiling (\S+)\)", out)
    assert line, out
    assert float(line[1]) <= float(line[3])
  assert len(re.findall(r"f-DP audit of the same guesses against Gaussian"
                        r" curves: \d+\.\d{3} \(ceiling \d+\.\d\d\)", out)) == 2
  assert not (tmp_path / "runs" / "audit.log").exists()


@pytest.mark.parametrize("flags, message", [
    (["--guesses", "2000"], r"--guesses: 2000 is not allowed; an integer in"
                            r" \[2, --canaries = 1000\]"),
    (["--canaries", "0"], "--canaries"),
    (["--confidence", "1.5"], "--confidence"),
    (["--trial", "best"], "--trial: 'best' is not allowed; only with a search"
                          " directory"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, flags, message):
  with pytest.raises(SystemExit) as exit_info:
    cli.main(["audit", DEMO, *flags, *_options(tmp_path)])
  assert exit_info.value.code == 2
  [line] = capsys.readouterr().err.strip().splitlines()
  assert re.search(message, line), line
  assert not (tmp_path / "mlflow.db").exists()


def test_help_says_what_an_audit_proves_and_what_it_cannot(capsys):
  with pytest.raises(SystemExit):
    cli.main(["audit", "--help"])
  text = " ".join(capsys.readouterr().out.split())
  for phrase in ("lower bound", "ceiling", "final model", "test split",
                 "--base private", "tan_tune.kind=audit", "f-DP"):
    assert phrase in text, phrase
