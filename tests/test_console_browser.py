"""The operator pages in a real browser: Debian's headless Chromium, driven by
Selenium through /usr/bin/chromedriver (named explicitly, so Selenium Manager
fetches nothing), against pytest-django's live server. A worker completes
the tasks over HTTP while the execution page follows it to the end."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from console import graph
from tests.engine_helpers import register, simple, start, task_def

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
WAIT_S = 30.0  # the page refreshes every 2 s; this bounds every wait

pytestmark = [
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="Debian's chromium is not installed at /usr/bin/chromium (apt-get install -y chromium chromium-driver)",
    ),
    pytest.mark.django_db(transaction=True),  # the live server's thread must see committed rows
    pytest.mark.slow,
]

PASSWORD = "operator-password-1"


@pytest.fixture(scope="module")
def browser():
    assert CHROMEDRIVER.exists() or shutil.which("chromedriver"), "chromium is here but chromedriver is not"
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1000",
        "--disable-extensions",
        "--no-first-run",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(WAIT_S)
    yield driver
    driver.quit()


@pytest.fixture
def operator(django_user_model):
    return django_user_model.objects.create_user("operator", password=PASSWORD, is_staff=True)


@pytest.fixture
def worker(live_server, make_key):
    """A worker of namespace "default" speaking HTTP to the live server."""
    with httpx.Client(
        base_url=f"{live_server.url}/v1/ns/default/", headers={"x-api-key": make_key("worker")}, timeout=WAIT_S
    ) as client:
        yield Worker(client)


class Worker:
    def __init__(self, client: httpx.Client) -> None:
        self.client = client

    def complete_one(self, queue: str) -> None:
        response = self.client.post(f"tasks/poll/{queue}", json={"workerId": "browser-test", "count": 1})
        assert response.status_code == 200, response.text
        (task,) = response.json()
        done = self.client.post(
            f"tasks/{task['taskId']}/result",
            json={"leaseToken": task["leaseToken"], "status": "COMPLETED", "outputData": {"ok": True}},
        )
        assert done.status_code == 200, done.text


def rgb(colour: str) -> str:
    """``#31a354`` → ``rgb(49, 163, 84)``, as getComputedStyle reports it."""
    red, green, blue = (int(colour[index : index + 2], 16) for index in (1, 3, 5))
    return f"rgb({red}, {green}, {blue})"


def fill_of(driver, key: str) -> str | None:
    """The computed fill of a graph node's box (None while it is not drawn)."""
    return driver.execute_script(
        "var box = document.querySelector('#graph g.node[data-key=\"' + arguments[0] + '\"] rect');"
        "return box ? getComputedStyle(box).fill : null;",
        key,
    )


def wait_for_fills(driver, expected: dict[str, str]) -> None:
    wanted = {key: rgb(graph.STATUS_COLOURS[status]) for key, status in expected.items()}

    def drawn(d) -> bool:
        return all(fill_of(d, key) == colour for key, colour in wanted.items())

    try:
        WebDriverWait(driver, WAIT_S, poll_frequency=0.2).until(drawn)
    except Exception:  # noqa: BLE001 - whatever the wait raised, say what the page showed instead
        seen = {key: fill_of(driver, key) for key in wanted}
        raise AssertionError(f"graph fills: wanted {wanted}, saw {seen}") from None


def log_in(driver, base: str, path: str) -> None:
    driver.get(base + path)
    WebDriverWait(driver, WAIT_S).until(expected_conditions.presence_of_element_located((By.ID, "id_username")))
    assert "/admin/login/" in driver.current_url  # staff only: sent to the login first
    driver.find_element(By.ID, "id_username").send_keys("operator")
    driver.find_element(By.ID, "id_password").send_keys(PASSWORD)
    driver.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    WebDriverWait(driver, WAIT_S).until(expected_conditions.url_to_be(base + path))


def test_an_operator_follows_a_running_execution_to_completion(browser, live_server, api, operator, worker):
    for name in ("pick", "pack", "ship"):
        task_def(api, name)
    register(
        api,
        "shipment",
        {
            "name": "fork",
            "taskReferenceName": "fork",
            "type": "FORK_JOIN",
            "forkTasks": [[simple("pick")], [simple("pack")]],
        },
        {"name": "join", "taskReferenceName": "join", "type": "JOIN", "joinOn": ["pick", "pack"]},
        simple("ship"),
    )
    pk = start(api, "shipment", correlationId="order-4711")["id"]

    log_in(browser, live_server.url, "/console/")
    header = browser.find_element(By.CSS_SELECTOR, "header.top")
    assert header.value_of_css_property("background-color") == "rgba(35, 49, 63, 1)"  # our stylesheet was served
    row = browser.find_element(By.CSS_SELECTOR, f'#executions tr[data-id="{pk}"]')
    assert "order-4711" in row.text and "RUNNING" in row.text
    row.find_element(By.CSS_SELECTOR, "a.execution-link").click()

    WebDriverWait(browser, WAIT_S).until(expected_conditions.presence_of_element_located((By.ID, "graph")))
    assert browser.current_url == f"{live_server.url}/console/executions/{pk}"
    wait_for_fills(
        browser,
        {
            "fork": "IN_PROGRESS",
            "pick": "SCHEDULED",
            "pack": "SCHEDULED",
            "join": graph.NOT_STARTED,
            "ship": graph.NOT_STARTED,
        },
    )
    browser.execute_script("window.followedWithoutReload = true;")

    worker.complete_one("pick")
    wait_for_fills(browser, {"pick": "COMPLETED", "pack": "SCHEDULED", "join": graph.NOT_STARTED})
    worker.complete_one("pack")
    wait_for_fills(browser, {"fork": "COMPLETED", "pack": "COMPLETED", "join": "COMPLETED", "ship": "SCHEDULED"})
    worker.complete_one("ship")
    wait_for_fills(browser, dict.fromkeys(("fork", "pick", "pack", "join", "ship"), "COMPLETED"))

    status = browser.find_element(By.CSS_SELECTOR, "#execution-status .badge")
    assert status.text == "COMPLETED"
    assert status.value_of_css_property("background-color") == rgb(graph.EXECUTION_COLOURS["COMPLETED"]).replace(
        "rgb(", "rgba("
    ).replace(")", ", 1)")
    live = browser.find_element(By.ID, "live")
    assert live.get_attribute("data-refresh-seconds") is None  # it stopped following
    assert browser.execute_script("return window.followedWithoutReload === true;")  # updated in place, no reload
    assert "browser-test" in browser.find_element(By.ID, "task-ship").text  # the worker that ran it


def test_the_controls_page_shows_the_queue_a_worker_polled(browser, live_server, api, operator, worker):
    task_def(api, "pick", concurrentExecLimit=1)
    register(api, "picking", simple("pick"))
    start(api, "picking")
    start(api, "picking")
    worker.complete_one("pick")  # one done; the other waits in the queue
    log_in(browser, live_server.url, "/console/ns/default/controls")
    queue = browser.find_element(By.CSS_SELECTOR, '#queues tr[data-queue="pick"]')
    assert queue.find_element(By.CSS_SELECTOR, ".depth").text == "1"
    assert "concurrentExecLimit 0/1" in queue.text
    assert "browser-test" in browser.find_element(By.ID, "workers").text


def test_the_controls_page_filters_its_queues_to_those_held_back(browser, live_server, api, operator):
    """Issue 19.5: a namespace that has seen thousands of queues listed them
    all; the filter narrows to a name and to what a control holds back."""
    task_def(api, "held_pick", concurrentExecLimit=1)
    register(api, "picking", simple("held_pick"))
    start(api, "picking")
    start(api, "picking")
    leased = api.post("tasks/poll/held_pick", {"workerId": "w", "count": 1}).json()
    assert len(leased) == 1  # the cap is full: the second waits
    for index in range(60):
        task_def(api, f"idle_{index:02d}")
    log_in(browser, live_server.url, "/console/ns/default/controls")
    rows = browser.find_elements(By.CSS_SELECTOR, "#queues tbody tr[data-queue]")
    assert len(rows) == 50  # one page of 61
    assert "page 1 of 2" in browser.find_element(By.ID, "queue-count").text

    browser.find_element(By.ID, "id_held").click()
    browser.find_element(By.CSS_SELECTOR, "#queue-filters button[type=submit]").click()
    WebDriverWait(browser, WAIT_S).until(expected_conditions.url_contains("held=on"))
    rows = browser.find_elements(By.CSS_SELECTOR, "#queues tbody tr[data-queue]")
    assert [row.get_attribute("data-queue") for row in rows] == ["held_pick"]
    assert "concurrentExecLimit" in rows[0].find_element(By.CSS_SELECTOR, ".error").text

    browser.find_element(By.ID, "id_held").click()  # off again
    name = browser.find_element(By.ID, "id_queue")
    name.clear()
    name.send_keys("IDLE_0")
    browser.find_element(By.CSS_SELECTOR, "#queue-filters button[type=submit]").click()
    WebDriverWait(browser, WAIT_S).until(expected_conditions.url_contains("queue=IDLE_0"))
    rows = browser.find_elements(By.CSS_SELECTOR, "#queues tbody tr[data-queue]")
    assert [row.get_attribute("data-queue") for row in rows] == [f"idle_0{i}" for i in range(10)]
