"""Headless Chromium for the web page tests: Debian's `chromium` driven by Selenium
(PyPI) through Debian's `chromium-driver` — no browser download. Tests skip with the
reason when either is missing (scripts/setup.sh installs both)."""
import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("MINFER_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("MINFER_CHROMEDRIVER", "/usr/bin/chromedriver")
# Screenshots go under the build folder (CI keeps them as artifacts; never committed).
ARTIFACTS = Path(os.environ.get("MINFER_BUILD_DIR", "build")) / "artifacts" / "web"


def missing_reason():
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (scripts/setup.sh)"
    for exe in (CHROMIUM, CHROMEDRIVER):
        if not (os.path.exists(exe) or shutil.which(exe)):
            return f"{exe} not found (scripts/setup.sh installs chromium and chromium-driver)"
    return None


def make_driver(width=1280, height=900):
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    o = webdriver.ChromeOptions()
    o.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--no-first-run", "--disable-extensions", "--disable-background-networking",
              f"--window-size={width},{height}"):
        o.add_argument(a)
    o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=o)


def screenshot(driver, name):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    assert driver.save_screenshot(str(path)), f"cannot write {path}"
    assert path.stat().st_size > 1000
    return path


def wait_until(driver, js, timeout_s=30, poll_s=0.05, what=None):
    """Polls a JS expression until it is truthy; returns its value."""
    import time

    t0 = time.time()
    while time.time() - t0 < timeout_s:
        v = driver.execute_script("return " + js)
        if v:
            return v
        time.sleep(poll_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what or js}")
