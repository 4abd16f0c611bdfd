"""Tests of the privacy report shared by the CLI, the search and promote."""

import json

import pytest

from tan_tune.privacy import report as privacy_report
from tan_tune.privacy import triplet as triplet_lib


def test_report_gathers_every_accountant_and_the_regime():
  t = triplet_lib.PrivacyTriplet(50000, 4096, 3.0, 2500)
  report = privacy_report.privacy_report(t)
  assert report.delta == 1 / 50000
  assert set(report.epsilons) == {"rdp", "prv", "pld"}
  assert report.regime is triplet_lib.Regime.TAN
  # Above the wall the accountants sit just under eps_TAN.
  for name in report.epsilons:
    assert 0.8 < report.eps_over_eps_tan(name) < 1.0


def test_as_dict_is_json_ready_and_complete():
  t = triplet_lib.PrivacyTriplet(50000, 256, 3 / 16, 2500)
  report = privacy_report.privacy_report(t, 1e-5, ("rdp",))
  data = json.loads(json.dumps(report.as_dict()))
  assert data["regime"] == "privacy wall"
  assert data["eta"] == pytest.approx(t.eta)
  assert data["epsilon"]["rdp"]["adjacency"] == "add/remove-one"
