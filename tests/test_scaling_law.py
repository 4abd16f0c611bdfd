"""Tests of the accuracy-vs-log-B fit and its prediction interval."""

import math

import numpy as np
import pytest

from tan_tune.promote import scaling_law


def test_recovers_known_slopes_on_exact_points():
  for slope, intercept in ((0.02, 0.5), (-0.01, 0.9), (0.0, 0.7)):
    batch_sizes = [64, 128, 256, 512]
    accuracies = [intercept + slope * math.log2(b) for b in batch_sizes]
    fitted = scaling_law.fit(batch_sizes, accuracies)
    assert fitted.slope == pytest.approx(slope, abs=1e-12)
    assert fitted.intercept == pytest.approx(intercept, abs=1e-12)
    assert fitted.predict(4096) == pytest.approx(intercept + 12 * slope)


def test_recovers_a_slope_through_noise_and_covers_the_truth():
  generator = np.random.default_rng(0)
  batch_sizes = [32, 64, 128, 256] * 5
  covered = 0
  for _ in range(200):
    accuracies = [0.4 + 0.03 * math.log2(b) + generator.normal(0, 0.01)
                  for b in batch_sizes]
    fitted = scaling_law.fit(batch_sizes, accuracies)
    assert fitted.slope == pytest.approx(0.03, abs=0.01)
    truth = 0.4 + 0.03 * 12 + generator.normal(0, 0.01)  # A new run at 4096.
    low, high = fitted.interval(4096, level=0.9)
    covered += low <= truth <= high
  assert 0.8 <= covered / 200 <= 0.97  # About 90%.


def test_two_points_give_a_line_but_no_interval_and_one_gives_none():
  fitted = scaling_law.fit([64, 128], [0.8, 0.85])
  assert fitted.slope == pytest.approx(0.05)
  assert fitted.interval(512) is None
  assert fitted.as_dict(512)["interval"] is None
  assert scaling_law.fit([64, 64], [0.8, 0.81]) is None
  assert scaling_law.fit([64], [0.8]) is None


def test_the_interval_widens_with_extrapolation():
  fitted = scaling_law.fit([16, 32, 64], [0.70, 0.74, 0.77])
  near = fitted.interval(128)
  far = fitted.interval(8192)
  assert far[1] - far[0] > near[1] - near[0]


def test_bad_points_are_refused():
  with pytest.raises(ValueError, match="2 batch sizes but 1"):
    scaling_law.fit([1, 2], [0.5])
  with pytest.raises(ValueError, match="> 0"):
    scaling_law.fit([0, 2], [0.5, 0.6])


def test_plot_writes_a_png(tmp_path):
  fitted = scaling_law.fit([16, 32, 64], [0.70, 0.74, 0.77])
  out = scaling_law.plot(fitted, 1024, tmp_path / "law.png", actual=0.9)
  assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_predictions_stay_within_zero_and_one():
  fitted = scaling_law.fit([16, 32, 64], [0.90, 0.95, 0.99])
  assert fitted.predict(1 << 20) == 1.0
  low, high = fitted.interval(1 << 20)
  assert 0 <= low <= high == 1.0
