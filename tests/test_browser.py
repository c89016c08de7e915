"""The Dagster UI as a user sees it: `medallion ui` on the embedded home (a real dagster webserver and
daemon), driven by headless Chromium through Selenium. Materialize all from the group's lineage, then halt
with the README's plain SQL kill switch and read the halt and its reason on the run page."""

from __future__ import annotations

import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from unittest.mock import patch

import psutil
import pytest
from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from tests.conftest import SEED

pytestmark = pytest.mark.integration  # a browser, `medallion ui` and its daemon

MEDALLION = [sys.executable, "-m", "medallion_assets.cli"]
# Debian's packages (the Makefile's test target installs them): nothing is downloaded at run time.
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
RUN_DEADLINE_SECONDS = 600
DONE = {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}


@dataclass
class UI:
    url: str
    home: Path
    process: subprocess.Popen

    def instance(self) -> DagsterInstance:
        """The instance `medallion ui` runs on, opened as Dagster's tools open it: from DAGSTER_HOME, which
        its dagster.yaml refers to."""
        with patch.dict(os.environ, {"DAGSTER_HOME": str(self.home / "dagster")}):
            return DagsterInstance.get()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.fixture
def ui(tmp_path):
    """The first steps of the README and docs/development.md in a new shell (no variable exported), then
    `medallion ui` on a free port."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("MEDALLION_", "AWS_ENDPOINT_URL")) and name != "DAGSTER_HOME"
    }
    for args in (
        ("sample-data", "--rows", "1000", "--to", ".medallion/s3/medallion-raw"),
        ("catalog", "load", str(SEED)),
    ):
        done = subprocess.run(
            [*MEDALLION, *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
    port = _free_port()
    log = (tmp_path / "ui.log").open("w")
    process = subprocess.Popen(
        [*MEDALLION, "ui", "--port", str(port)], env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    while not _answers(f"{url}/server_info"):
        assert process.poll() is None, (tmp_path / "ui.log").read_text()
        time.sleep(1)
    yield UI(url, tmp_path / ".medallion", process)
    dagster_dev = [
        child for child in psutil.Process(process.pid).children() if "dagster" in " ".join(child.cmdline())
    ]
    group = os.getpgid(dagster_dev[0].pid)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=120) == 128 + signal.SIGTERM
    log.close()
    # Nothing of dagster dev outlives it: not the webserver, the daemon, the code server nor a run worker.
    left = [p for p in psutil.process_iter() if _in_group(p, group) and p.status() != psutil.STATUS_ZOMBIE]
    assert left == []


def _in_group(process: psutil.Process, group: int) -> bool:
    try:
        return os.getpgid(process.pid) == group
    except ProcessLookupError:
        return False


@pytest.fixture
def browser(tmp_path):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1600,1000"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.implicitly_wait(30)
    yield driver
    driver.save_screenshot(str(tmp_path / "last_page.png"))  # what the browser showed last, for a failure
    driver.quit()


def _materialize_all(browser, ui: UI) -> str:
    """Open the group's lineage, click "Materialize all"; returns the launched run's id (from the toast's
    link)."""
    browser.get(f"{ui.url}/locations/medallion/asset-groups/user_events_etl/lineage")
    for skip in browser.find_elements(
        By.XPATH, "//button[normalize-space()='Skip']"
    ):  # Dagster's welcome dialog
        skip.click()
    browser.find_element(By.XPATH, "//button[starts-with(normalize-space(), 'Materialize all')]").click()
    link = WebDriverWait(browser, 60).until(
        expected_conditions.presence_of_element_located(
            (By.XPATH, "//a[normalize-space()='View' and contains(@href, '/runs/')]")
        )
    )
    return link.get_attribute("href").rsplit("/runs/", 1)[1]


def _finished(ui: UI, run_id: str):
    instance = ui.instance()
    deadline = time.monotonic() + RUN_DEADLINE_SECONDS
    while (run := instance.get_run_by_id(run_id)) is None or run.status not in DONE:
        assert time.monotonic() < deadline, f"run {run_id} still {run.status if run else 'unknown'}"
        time.sleep(2)
    return run


def _page_text(browser, url: str, expected: str) -> str:
    """The page's text once `expected` shows (the UI renders asynchronously)."""
    browser.get(url)
    WebDriverWait(browser, 60).until(
        expected_conditions.text_to_be_present_in_element((By.TAG_NAME, "body"), expected)
    )
    return browser.find_element(By.TAG_NAME, "body").text


def test_materialize_all_from_the_ui_then_a_plain_sql_kill_switch_halts_it_visibly(ui, browser):
    run_id = _materialize_all(browser, ui)
    assert _finished(ui, run_id).status == DagsterRunStatus.SUCCESS
    checks = _page_text(browser, f"{ui.url}/assets/gold/daily_user_events?view=checks", "unique_event_date")
    for check in (
        "row_count",
        "not_null_event_date",
        "unique_event_date",
        "range_total_events",
        "schema_match",
    ):
        assert f"{check}\nSucceeded" in checks
    _page_text(
        browser, f"{ui.url}/assets/gold/daily_user_events?view=events", f"Materialized in run {run_id[:8]}"
    )

    with sqlite3.connect(ui.home / "catalog.db") as catalog:
        flipped = catalog.execute(
            "UPDATE control_flags SET flag_value = false, reason = 'bad upstream' "
            "WHERE entity_type = 'stage' AND entity_id = 'user_events_etl.silver_clean'"
        )
        assert flipped.rowcount == 1
    halted_run_id = _materialize_all(browser, ui)
    halted = _finished(ui, halted_run_id)
    reason = "stage user_events_etl.silver_clean disabled by sql: bad upstream"
    # The flag may find the run still queued (the control sensor cancels it) or started (its stage halts):
    # either way the run says so, with the reason, on its page.
    if halted.status == DagsterRunStatus.CANCELED:
        status, message = "cancelled", f"cancelled by the medallion_control sensor: {reason}"
    else:
        status, message = "halted", f"halted by a kill switch before start: {reason}"
        failures = [
            record.event_log_entry.dagster_event.step_failure_data
            for record in ui.instance()
            .get_records_for_run(halted_run_id, of_type=DagsterEventType.STEP_FAILURE)
            .records
        ]
        assert [
            (f.user_failure_data.description if f.user_failure_data else f.error.message) for f in failures
        ] == [message]
        assert halted.status == DagsterRunStatus.FAILURE
    assert (halted.tags["medallion/status"], halted.tags["medallion/halt_reason"]) == (status, reason)
    _page_text(browser, f"{ui.url}/runs/{halted_run_id}", message)
    # The run's tags, behind the run page's "View tags and config" (a run cancelled in the queue shows them
    # nowhere else), rendered apart from its log, so waited for on their own.
    browser.find_element(By.XPATH, "//button[contains(., 'View tags and config')]").click()
    WebDriverWait(browser, 60).until(
        expected_conditions.text_to_be_present_in_element((By.TAG_NAME, "body"), "medallion/status")
    )
    page = browser.find_element(By.TAG_NAME, "body").text
    assert re.search(rf"medallion/status\W+{status}", page), page
