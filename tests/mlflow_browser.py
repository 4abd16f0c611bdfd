"""A real `mlflow ui` and headless Chromium (Selenium) to look at it."""

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest


def chromium():
  """Headless Chromium through Selenium, or a skip saying what is missing."""
  webdriver = pytest.importorskip("selenium.webdriver")
  binary = shutil.which("chromium") or shutil.which("chromium-browser")
  chromedriver = shutil.which("chromedriver")
  if not (binary and chromedriver):
    pytest.skip("no Chromium: apt-get install chromium chromium-driver"
                " (make test installs them where it runs as root)")
  options = webdriver.ChromeOptions()
  options.binary_location = binary
  for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
               "--window-size=1400,900"):
    options.add_argument(flag)
  return webdriver.Chrome(
      service=webdriver.ChromeService(executable_path=chromedriver),
      options=options)


@contextlib.contextmanager
def mlflow_ui(uri):
  """`mlflow ui` over the store at `uri`, once it answers: its port."""
  with socket.socket() as probe:
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
  # Without server-side jobs (GenAI evaluations), which the pages looked at
  # never use: their runner starts eight more processes, each importing MLflow.
  server = subprocess.Popen(
      [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri,
       "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
      env=dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false"),
      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  try:
    deadline = time.time() + 120
    while True:
      try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health") as ok:
          if ok.status == 200:
            break
      except OSError:
        assert time.time() < deadline, "mlflow ui did not start"
        time.sleep(1)
    yield port
  finally:
    server.terminate()
    server.wait()


def wait_for_text(browser, *texts, timeout=60):
  from selenium.webdriver.common.by import By  # pylint: disable=g-import-not-at-top
  from selenium.webdriver.support.ui import WebDriverWait  # pylint: disable=g-import-not-at-top
  WebDriverWait(browser, timeout).until(
      lambda b: all(t in b.find_element(By.TAG_NAME, "body").text
                    for t in texts))
  return browser.find_element(By.TAG_NAME, "body").text


def image_rendered(browser, path, timeout=60):
  """The artifact page of `path` shows a decoded picture (MLflow loads it
  into a blob: URL)."""
  from selenium.webdriver.support.ui import WebDriverWait  # pylint: disable=g-import-not-at-top
  wait_for_text(browser, path, timeout=timeout)
  WebDriverWait(browser, timeout).until(lambda b: b.execute_script(
      "return Array.from(document.images).some(i => i.complete &&"
      " i.naturalWidth > 300 && i.src.startsWith('blob:'))"))
