"""`--release-at` of `tan-tune search`, `promote` and `train`: read once,
handed to the Python API, refused in one line where nothing private is
released. (The wait itself: `test_release_time.py`; what other users then
see: `test_private_search.py`, `test_leak_scanner.py`.)"""

import pathlib

import pytest

from tan_tune import api
from tan_tune.cli import main as cli
from tan_tune.release import release_time

SPACES = pathlib.Path(__file__).resolve().parents[2] / "search_spaces"
_PUBLIC_RUN = """\
dataset: {name: digits}
model: {name: small-cnn}
privacy: {batch_size: 64, noise_multiplier: 0, steps: 4, private: false}
eval_every: 2
device: cpu
"""


def _released(tmp_path) -> dict[str, object]:
  """What each command's API call returns, as little as its printing
  reads: a private search's release, a promotion's plan, a run's metrics."""
  return {
      "search": api.SearchResult(
          tmp_path, "ema_accuracy", [], {
              "value": 0.9, "params": {"lr": 2.0},
              "test_accuracy": {"ema_accuracy": 0.9},
              "epsilon": {"describe": "eps = 2.030"}},
          "run-1", "sqlite:///mlflow.db", "1", private=True),
      "promote": api.Promotion(None, None),
      "train": api.Training(None, {
          "step": 4, "private": True, "simulated": False, "epsilon": 1.0,
          "accountant": "rdp", "adjacency": "add/remove-one",
          "sampling": "poisson"}, [], "charge"),
  }


@pytest.mark.parametrize("argv", [
    ["search", str(SPACES / "digits-private.yaml")],
    ["promote", "runs/digits-demo"],
    ["train", "run.yaml"],
])
def test_the_release_time_reaches_the_api(tmp_path, monkeypatch, argv):
  seen = {}

  def call(*_, **options):
    seen.update(options)
    return _released(tmp_path)[argv[0]]

  monkeypatch.setattr(api, argv[0], call)
  assert cli.main([*argv, "--release-at", "+1h30m"]) == 0
  assert seen["release_at"] == release_time.ReleaseAt(5400)


@pytest.mark.parametrize("command", ["search", "promote", "train"])
def test_a_release_time_it_cannot_read_is_one_line(command, capsys):
  with pytest.raises(SystemExit) as exit_:
    cli.main([command, "x", "--release-at", "2h"])
  assert exit_.value.code == 2
  [line] = capsys.readouterr().err.splitlines()
  assert line.startswith(f"tan-tune {command}: error: argument --release-at:"
                         " '2h' is not allowed; a duration from the run's"
                         " start, such as +90m")


@pytest.mark.parametrize("argv, why", [
    ([str(SPACES / "digits-demo.yaml"), "--storage", "runs"],
     "a search of simulated trials releases nothing private"),
    (["public.yaml"], "this config is not a private run"),
])
def test_a_release_time_is_refused_where_nothing_private_is_released(
    tmp_path, monkeypatch, capsys, argv, why):
  monkeypatch.chdir(tmp_path)
  (tmp_path / "public.yaml").write_text(_PUBLIC_RUN)
  command = "search" if argv[0].endswith("demo.yaml") else "train"
  with pytest.raises(SystemExit) as exit_:
    cli.main([command, *argv, "--release-at", "+2h"])
  assert exit_.value.code == 2
  [line] = capsys.readouterr().err.splitlines()
  assert line.startswith(f"tan-tune {command}: error: --release-at: '+2h'"
                         " is not allowed; unset: ")
  assert why in line
  assert sorted(p.name for p in tmp_path.iterdir()) == ["public.yaml"]
