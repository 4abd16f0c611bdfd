"""`tan-tune search`'s refusals of its options, in process: one line naming
the option, a non-zero exit, nothing written. (Whole searches through the
command: `test_cli_search_and_promote.py`, `test_examples.py`.)"""

import pathlib

import pytest

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
          "value": 0.9, "params": {"lr": 2.0},
          "epsilon": {"describe": "eps = 2.030 at delta = 0.000696"}},
      "run-1", "sqlite:///mlflow.db", "1", registered=("digits", "3"))
  text = cli_search.render_release(result)
  assert "registered: digits version 3, alias candidate" in text
