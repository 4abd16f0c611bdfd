"""The documentation site builds, in strict mode, and reads in a browser.

`make docs` runs `mkdocs build --strict`: a broken link or anchor, a page
left out of the navigation, or a docstring griffe cannot read (a parameter
documented that the signature lacks) is a warning, and a warning fails the
build. The API reference must then show every name of `tan_tune.api` with
each of its parameters; and in headless Chromium, served over HTTP as a
reader gets it, the home page and the API page render and the search finds
a page. TAN_TUNE_SCREENSHOTS=docs keeps their screenshots in docs/.
"""

import contextlib
import functools
import html.parser
import http.server
import os
import pathlib
import subprocess
import sys
import threading

import pytest

import mlflow_browser
from tan_tune import api

ROOT = pathlib.Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> pathlib.Path:
  """The site, built as `make docs` builds it, into a folder of its own."""
  folder = tmp_path_factory.mktemp("site")
  done = subprocess.run(
      [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
       str(folder)], cwd=ROOT, capture_output=True, text=True, check=False,
      env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
  assert done.returncode == 0 and "WARNING" not in done.stderr, done.stderr
  return folder


class _Reference(html.parser.HTMLParser):
  """The API page's objects: each top-level heading's name, and the names in
  the first column of the parameter and attribute tables under it."""

  def __init__(self):
    super().__init__()
    self.objects: dict[str, list[str]] = {}
    self._current = None
    self._row = False
    self._cell = 0
    self._in_code = 0

  def handle_starttag(self, tag, attrs):
    attrs = dict(attrs)
    heading = attrs.get("id") or ""
    if tag in ("h2", "h3", "h4") and heading.startswith("tan_tune.api."):
      name = heading.removeprefix("tan_tune.api.")
      # A member's heading (`Promotion.plan`) ends its owner's tables.
      self._current = None if "." in name else name
      if self._current:
        self.objects[name] = []
    elif tag == "tr":
      self._row, self._cell = "doc-section-item" in attrs.get("class", ""), 0
    elif tag == "td":
      self._cell += 1
    elif tag == "code":
      self._in_code += 1

  def handle_endtag(self, tag):
    if tag == "code":
      self._in_code -= 1
    elif tag == "tr":
      self._row = False

  def handle_data(self, data):
    if self._current and self._row and self._cell == 1 and self._in_code:
      self.objects[self._current].append(data.strip())


def test_the_api_page_shows_every_name_with_its_parameters(site):
  reference = _Reference()
  reference.feed((site / "reference" / "api" / "index.html").read_text())
  assert sorted(reference.objects) == sorted(api.__all__)
  missing = {}
  for name in api.__all__:
    value = getattr(api, name)
    if callable(value) and not isinstance(value, type):
      wanted = value.__code__.co_varnames[:value.__code__.co_argcount
                                          + value.__code__.co_kwonlyargcount]
      absent = [p for p in wanted if p not in reference.objects[name]]
      if absent:
        missing[name] = absent
  assert missing == {}


@contextlib.contextmanager
def _served(folder: pathlib.Path):
  """`folder` over HTTP on 127.0.0.1: its base URL."""
  handler = functools.partial(_QuietHandler, directory=str(folder))
  server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
  thread = threading.Thread(target=server.serve_forever, daemon=True)
  thread.start()
  try:
    yield f"http://127.0.0.1:{server.server_address[1]}"
  finally:
    server.shutdown()
    server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):

  def log_message(self, *args):
    del args  # The test's output is its assertions.


@pytest.mark.browser
def test_the_home_and_api_pages_in_a_browser(site, tmp_path):
  from selenium.webdriver.common.by import By  # pylint: disable=g-import-not-at-top
  from selenium.webdriver.common.keys import Keys  # pylint: disable=g-import-not-at-top
  from selenium.webdriver.support.ui import WebDriverWait  # pylint: disable=g-import-not-at-top
  browser = mlflow_browser.chromium()
  shots = pathlib.Path(os.environ.get("TAN_TUNE_SCREENSHOTS", tmp_path))
  try:
    with _served(site) as base:
      browser.get(f"{base}/")
      mlflow_browser.wait_for_text(browser, "Where to read", "The TAN idea",
                                   "API reference")
      browser.save_screenshot(str(shots / "site-home.png"))
      # The search box finds the page that defines eta.
      box = browser.find_element(By.CSS_SELECTOR, "input.md-search__input")
      box.click()
      box.send_keys("total amount of noise")
      WebDriverWait(browser, 60).until(lambda b: "The TAN idea" in b.find_element(
          By.CSS_SELECTOR, ".md-search-result").text)
      box.send_keys(Keys.ESCAPE)

      # The page at `search`: a function, its parameters and its errors.
      browser.get(f"{base}/reference/api/#tan_tune.api.search")
      text = mlflow_browser.wait_for_text(browser, "tan_tune.api.search",
                                          "tan_tune.api.promote")
      assert "Parameters:" in text and "Raises:" in text, text[:2000]
      browser.save_screenshot(str(shots / "site-api.png"))
  finally:
    browser.quit()
