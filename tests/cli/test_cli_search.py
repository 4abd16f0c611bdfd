"""`tan-tune search`'s refusals of its options, in process: one line naming
the option, a non-zero exit, nothing written. (Whole searches through the
command: `test_cli_search_and_promote.py`, `test_examples.py`.)"""

import pathlib

import pytest
import yaml

from tan_tune.cli import main as cli
from tan_tune.cli import search as cli_search
from tan_tune.search import driver as search

SPACES = pathlib.Path(__file__).resolve().parents[2] / "search_spaces"


def _refused(tmp_path, capsys, monkeypatch, *argv) -> str:
  monkeypatch.chdir(tmp_path)
  with pytest.raises(SystemExit) as exit_:
    cli.main(["search", *map(str, argv), "--storage", str(tmp_path / "runs")])
  assert exit_.value.code == 2
  err = capsys.readouterr().err
  assert len(err.strip().splitlines()) == 1, err
  assert list(tmp_path.iterdir()) == []  # No search folder, no MLflow store.
  return err


def test_register_is_refused_where_no_model_is_released(tmp_path, capsys,
                                                        monkeypatch):
  err = _refused(tmp_path, capsys, monkeypatch,
                 SPACES / "digits-demo.yaml", "--register", "digits")
  assert err.startswith("tan-tune search: error: --register: 'digits'")
  assert "promote its winner with `tan-tune promote --register`" in err


def test_a_registered_name_must_fit_a_models_uri(tmp_path, capsys,
                                                 monkeypatch):
  err = _refused(tmp_path, capsys, monkeypatch,
                 SPACES / "digits-private.yaml", "--register", "my model")
  assert "--register: 'my model' is not allowed; letters, digits" in err


def test_a_registered_release_says_its_version(tmp_path):
  result = search.SearchResult(
      tmp_path, "ema_accuracy", [], {
          "value": 0.93, "params": {"lr": 2.0}, "select_on": "validation",
          "test_accuracy": {"ema_accuracy": 0.9},
          "epsilon": {"describe": "eps = 2.030 at delta = 0.000696"}},
      "run-1", "sqlite:///mlflow.db", "1", registered=("digits", "3"))
  text = cli_search.render_release(result)
  assert "registered: digits version 3, alias candidate" in text
  # The test accuracy is the release's; the score that chose it, not one.
  assert text.startswith("released: ema_accuracy 0.9000 on the test split"
                         " (chosen by its DP score on private validation;"
                         " the test split measured this model alone)")
  assert "0.93" not in text


@pytest.mark.parametrize("changes, expected", [
    # s = 100 on digits: 14 points of accuracy even on half of its 1437.
    ({"score_noise": 100}, "score_noise: 100.0 is not allowed; a noise the"
     " score survives: s = 100 is 14 points of accuracy even on half"),
    # About 14 examples for s = 2: 14 points; a fraction of 0.07 would do.
    ({"validation_fraction": 0.01}, "validation_fraction: 0.01 is not"
     " allowed; a split large enough for score_noise 2: about 14 examples"),
    ({"trial_count": {"distribution": "negative_binomial", "mean": 6,
                      "shape": -1.5}},
     "trial_count.shape: -1.5 is not allowed; a number eta > -1"),
    ({"score_noise": None}, "score_noise: None is not allowed; required in a"
     " private random search selecting on validation"),
])
def test_a_private_search_that_cannot_rank_is_refused_before_any_charge(
    tmp_path, tmp_path_factory, capsys, monkeypatch, changes, expected):
  space = yaml.safe_load((SPACES / "digits-private.yaml").read_text())
  space.update(changes)
  path = tmp_path_factory.mktemp("files") / "bad.yaml"
  path.write_text(yaml.safe_dump(space))
  err = _refused(tmp_path, capsys, monkeypatch, path, "--new-ledger")
  assert err.startswith(f"tan-tune search: error: {expected}"), err
