"""Connecting to Ray: RAY_ADDRESS, and a clear error for a wrong address."""

import pathlib
import socket

import pytest

from tan_tune import ray_cluster
from tan_tune.cli import main as cli
from tan_tune.errors import ConfigError

DEMO = pathlib.Path(__file__).resolve().parents[2] / "search_spaces" / "digits-demo.yaml"


def _closed_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]  # Closed once the socket is.


def test_the_flag_wins_then_ray_address_then_an_embedded_ray(monkeypatch):
  monkeypatch.delenv("RAY_ADDRESS", raising=False)
  assert ray_cluster.resolve_address(None) == (None, "--address")
  monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
  assert ray_cluster.resolve_address(None) == ("10.0.0.5:6379", "RAY_ADDRESS")
  assert ray_cluster.resolve_address("auto") == ("auto", "--address")


def test_a_wrong_address_is_a_clear_error_not_a_wait():
  address = f"127.0.0.1:{_closed_port()}"
  with pytest.raises(ConfigError, match="nothing answers") as error:
    ray_cluster.probe(address)
  assert error.value.field == "--address"
  with pytest.raises(ConfigError, match="host:port"):
    ray_cluster.probe("127.0.0.1:port")


def test_a_listening_address_passes_the_probe():
  with socket.socket() as server:
    server.bind(("127.0.0.1", 0))
    server.listen()
    ray_cluster.probe(f"ray://127.0.0.1:{server.getsockname()[1]}")


@pytest.mark.parametrize("command", ["search", "promote"])
def test_the_cli_exits_2_and_writes_nothing(tmp_path, capsys, monkeypatch,
                                            searches, command):
  monkeypatch.chdir(tmp_path)
  monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{_closed_port()}")
  if command == "search":
    argv = ["search", str(DEMO), "--storage", str(tmp_path / "runs")]
  else:
    argv = ["promote", str(searches.write(tmp_path))]
  with pytest.raises(SystemExit) as exit_:
    cli.main(argv)
  assert exit_.value.code == 2
  err = capsys.readouterr().err
  assert "RAY_ADDRESS" in err and "nothing answers" in err
  assert not (tmp_path / "mlflow.db").exists()
  assert not (tmp_path / "runs" / "digits-demo").exists()
  assert not list(tmp_path.glob("runs/*/promote"))
