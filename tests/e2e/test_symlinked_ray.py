"""The leak scanner's symlink case: a notebook's Ray behind a link.

`ray.init(_temp_dir=<a link in a 0700 folder to a 0755 one>)`, then a
private random search (search_spaces/digits-private.yaml) from Python, run
as a user runs it, under the scanner's spy. Ray names its session folder
through the link, so a check of that path finds the 0700 folder on the way;
another user reads the session where the link leads, and its workers' logs
named each trial (their number is the search's secret K). The search is
refused before its charge, and the scanner, which follows a link to where
it resolves, sees that folder as the other user does.
"""

import pathlib
import shutil
import tempfile

import pytest

import leak_scan

# A whole flow through Ray: the end-to-end tier.
pytestmark = [pytest.mark.e2e]

SPACE = (pathlib.Path(__file__).resolve().parents[2] / "search_spaces"
         / "digits-private.yaml")
_PROGRAM = """
import ray
from tan_tune import api
ray.init(address="local", include_dashboard=False, _temp_dir={temp_dir!r})
api.search({space!r}, new_ledger=True)
"""


@pytest.fixture
def folders():
  """A sandbox (short: Ray's socket paths must fit in 107 bytes) and a
  0755 folder beside it that every user may enter."""
  made = [pathlib.Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
          for prefix in ("leak", "leakopen")]
  made[1].chmod(0o755)
  yield made
  for folder in made:
    shutil.rmtree(folder, ignore_errors=True)


def test_a_ray_behind_a_symlink_to_an_open_folder_runs_no_trial(folders):
  root, opened = folders
  leak_scan.sandbox(root)
  hidden = root / "tmp" / "hidden"
  hidden.mkdir(mode=0o700)
  (hidden / "ray").symlink_to(opened)
  shutil.copyfile(SPACE, root / "work" / SPACE.name)
  flow = leak_scan.run_flow(root, program=_PROGRAM.format(
      temp_dir=str(hidden / "ray"), space=SPACE.name))
  # The scanner reads Ray's session where the link leads, as another user
  # does: no trial's name there (Ray's logs named each one).
  readable = leak_scan.readable_files(flow)
  assert any(str(path).startswith(f"{opened}/session_") for path in readable)
  names = [name.encode() for name in flow.secrets.get("trial_name", [])]
  assert [f"{path}: {name!r}" for path in readable for name in names
          if name in path.read_bytes()] == []
  # Refused before the charge: no K drawn, no trial named, no search made.
  output = flow.output.decode(errors="replace")
  assert flow.returncode and "is readable by other users" in output
  assert f"(at {opened}/session_" in output
  assert not {"trial_count", "trial_name"} & set(flow.secrets)
  assert not (flow.work / "runs").exists()
