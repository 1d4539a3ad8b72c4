"""Drives the Troupe dashboard in headless Chromium (Selenium) against a running cluster; run by
tests/dashboard_test.cc, which starts the 3-node cluster. Exits non-zero (with the reason) at the
first failed check. Saves a screenshot of every page (1366x768) into --screenshots.

    /usr/bin/python3 tests/dashboard_browser.py --url=http://127.0.0.1:PORT --token=T \
        --screenshots=DIR --actor-program=PATH --train-program=PATH --storage=DIR
"""
import argparse
import http.server
import json
import os
import tempfile
import threading
import time
import urllib.error
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait


class Api:
    """The head's REST API with the token or a given cookie and headers."""

    def __init__(self, url, token):
        self.url, self.token = url, token

    def call(self, method, path, body=None, headers=None, auth=True):
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        if auth:
            request.add_header("Authorization", "Bearer " + self.token)
        for key, value in (headers or {}).items():
            request.add_header(key, value)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.read().decode(errors="replace")
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode(errors="replace")

    def submit(self, submission_id, entrypoint):
        status, body = self.call("POST", "/api/jobs/",
                                 {"entrypoint": entrypoint, "submission_id": submission_id})
        check(status == 200, f"submitting {submission_id}: {status} {body}")

    def job(self, submission_id):
        status, body = self.call("GET", f"/api/jobs/{submission_id}")
        return json.loads(body) if status == 200 else None


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def step(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


class Browser:
    def __init__(self, url, screenshots):
        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1366,768", "--hide-scrollbars", "--force-device-scale-factor=1",
                     "--lang=en-US"):
            options.add_argument(flag)
        self.profile = tempfile.mkdtemp(prefix="dashboard-chromium-")
        options.add_argument("--user-data-dir=" + self.profile)
        self.driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
        # A 1366x768 page area, like a laptop screen.
        inner = self.driver.execute_script("return [window.innerWidth, window.innerHeight]")
        outer = self.driver.get_window_size()
        self.driver.set_window_size(1366 + outer["width"] - inner[0], 768 + outer["height"] - inner[1])
        self.url, self.screenshots = url, screenshots

    def open(self, fragment):
        self.driver.get(self.url + "/#/" + fragment)

    def wait(self, what, condition, timeout=60):
        try:
            # The page re-renders on every poll: an element found a moment ago may be gone.
            return WebDriverWait(self.driver, timeout, poll_frequency=0.25,
                                 ignored_exceptions=[StaleElementReferenceException]).until(
                lambda d: condition())
        except Exception as error:
            self.shot("failure-" + what.replace(" ", "_")[:40])
            raise AssertionError(f"timed out after {timeout} s waiting for {what}") from error

    def texts(self, selector):
        # In one script call, so a re-render cannot leave stale elements halfway.
        return self.driver.execute_script(
            "return [...document.querySelectorAll(arguments[0])].map(e => e.innerText)", selector)

    def text(self, selector):
        found = self.texts(selector)
        return found[0] if found else ""

    def shot(self, name):
        os.makedirs(self.screenshots, exist_ok=True)
        self.driver.save_screenshot(os.path.join(self.screenshots, name + ".png"))

    def js(self, script, *args):
        return self.driver.execute_script(script, *args)


def serve_evil_page(head_url):
    """A page on another origin (same host, another port: "same-site", so SameSite=Strict still
    sends the cookie) that tries to submit a job with the victim's session."""
    folder = tempfile.mkdtemp(prefix="dashboard-evil-")
    with open(os.path.join(folder, "index.html"), "w") as page:
        page.write(f"""<!DOCTYPE html><title>evil</title><script>
fetch('{head_url}/api/jobs/', {{method: 'POST', mode: 'no-cors', credentials: 'include',
  headers: {{'Content-Type': 'text/plain'}},
  body: JSON.stringify({{entrypoint: 'echo pwned', submission_id: 'evil-job'}})}})
  .then(() => document.title = 'sent', e => document.title = 'error ' + e);
</script>""")
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=folder, **k)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/index.html"


def test_login(b, api, token):
    step("login page: a wrong token is refused")
    b.driver.get(b.url + "/")
    b.wait("the login form", lambda: b.driver.find_element(By.ID, "login").is_displayed())
    b.shot("login")
    b.driver.find_element(By.ID, "login-token").send_keys("not-the-token")
    b.driver.find_element(By.ID, "login-submit").click()
    b.wait("the wrong-token message", lambda: "Wrong token" in b.text("#login-error"))
    check(not any(c["name"] == "troupe_session" for c in b.driver.get_cookies()),
          "a wrong token must not get a session cookie")
    step("log in with the cluster token")
    field = b.driver.find_element(By.ID, "login-token")
    field.clear()
    field.send_keys(token)
    b.driver.find_element(By.ID, "login-submit").click()
    b.wait("the overview after login", lambda: not b.driver.find_element(By.ID, "login").is_displayed())
    cookie = next(c for c in b.driver.get_cookies() if c["name"] == "troupe_session")
    check(cookie["httpOnly"] and cookie.get("sameSite") == "Strict", f"cookie flags: {cookie}")
    check("troupe_session" not in b.js("return document.cookie"), "the cookie must be HttpOnly")
    return cookie["value"]


def test_hostile_requests(b, api, session):
    step("hostile requests: forged cookie, cross-site, no Sec-Fetch-Site, traversal, big login")
    same_origin = {"Origin": api.url, "Sec-Fetch-Site": "same-origin"}
    ok = api.call("GET", "/api/v0/nodes", auth=False,
                  headers=dict(same_origin, Cookie="troupe_session=" + session))
    check(ok[0] == 200, f"the session cookie on a same-origin request: {ok}")
    cases = [
        ("forged cookie", dict(same_origin, Cookie="troupe_session=" + "0" * 64), 401),
        ("cookie, cross-site", {"Cookie": "troupe_session=" + session, "Sec-Fetch-Site": "cross-site"}, 403),
        ("cookie, other origin", {"Cookie": "troupe_session=" + session, "Origin": "http://evil.example",
                                  "Sec-Fetch-Site": "cross-site"}, 403),
        ("cookie, same-site other port", {"Cookie": "troupe_session=" + session,
                                          "Sec-Fetch-Site": "same-site"}, 401),
        ("cookie, no Sec-Fetch-Site", {"Cookie": "troupe_session=" + session}, 401),
    ]
    for name, headers, expected in cases:
        status, body = api.call("GET", "/api/v0/nodes", auth=False, headers=headers)
        check(status == expected, f"{name}: expected {expected}, got {status} {body[:200]}")
    for path in ("/dashboard/../../../../etc/passwd", "/dashboard/..%2f..%2f..%2fetc%2fpasswd",
                 "/dashboard/%2e%2e/%2e%2e/BUILD", "/dashboard/app.js/..%2f..%2fBUILD"):
        status, body = api.call("GET", path, auth=False)
        check(status in (400, 404) and "root:" not in body, f"{path}: {status} {body[:100]}")
    status, _ = api.call("POST", "/dashboard/login", b'{"token": "' + b"x" * 100000 + b'"}', auth=False)
    check(status == 413, f"an oversized login body: {status}")
    status, _ = api.call("POST", "/dashboard/login", {"token": "guess"}, auth=False)
    check(status == 401, f"a wrong token at login: {status}")

    step("a page on another origin cannot use the session (real browser, cookie sent)")
    server, evil_url = serve_evil_page(api.url)
    try:
        b.driver.get(evil_url)
        b.wait("the evil page's request", lambda: b.driver.title.startswith(("sent", "error")), 20)
    finally:
        server.shutdown()
    check(api.job("evil-job") is None, "a cross-origin request with the cookie submitted a job!")


def test_overview(b):
    step("overview: 3 nodes alive")
    b.open("overview")
    b.wait("3 alive nodes", lambda: sum("ALIVE" in t for t in b.texts("tr[data-node]")) == 3)
    b.wait("the resource bars", lambda: len(b.driver.find_elements(By.CSS_SELECTOR, ".bar")) >= 3)
    check("zone=b" in " ".join(b.texts("tr[data-node]")), "node labels are shown")


def test_job_logs_live(b, api):
    step("a job's log lines appear live on its page")
    entrypoint = "for i in 1 2 3 4 5 6 7 8; do echo dashboard-line-$i; sleep 1; done"
    api.submit("dashboard-echo", entrypoint)
    b.open("jobs/dashboard-echo")
    b.wait("the first log line", lambda: "dashboard-line-1" in b.text("#job-log"), 90)
    partial = b.text("#job-log")
    check("dashboard-line-8" not in partial, "lines must show while the job runs, not only at the end")
    b.wait("the last log line", lambda: "dashboard-line-8" in b.text("#job-log"), 60)
    b.wait("SUCCEEDED", lambda: "SUCCEEDED" in b.text("#job-details"), 60)
    b.shot("job")
    b.open("jobs")
    b.wait("the jobs list", lambda: any("dashboard-echo" in t for t in b.texts("tr[data-job]")))


def test_stop_button(b, api):
    step("the stop button stops a running job")
    api.submit("dashboard-sleep", "echo sleeping; sleep 300")
    b.open("jobs/dashboard-sleep")
    b.wait("the job to run", lambda: "RUNNING" in b.text("#job-details") and "sleeping" in b.text("#job-log"), 90)
    b.wait("the stop button", lambda: b.driver.find_element(By.ID, "job-stop").is_enabled())
    b.driver.find_element(By.ID, "job-stop").click()
    b.wait("STOPPED", lambda: "STOPPED" in b.text("#job-details"), 60)


def test_actor_death(b, api, program):
    step("a killed actor's death cause")
    api.submit("dashboard-actor", program)
    b.open("actors")
    search = b.wait("the actor filter", lambda: b.driver.find_element(By.ID, "actor-filter"))
    search.send_keys("doomed")
    Select(b.driver.find_element(By.ID, "actor-state")).select_by_value("DEAD")
    b.wait("the dead actor with its death cause",
           lambda: any("Doomed" in t and "DEAD" in t for t in b.texts("tr[data-actor]"))
           and all(b.texts("tr[data-actor] td.death-cause")), 120)
    cause = b.texts("tr[data-actor] td.death-cause")[0]
    step(f"  death cause: {cause!r}")
    check("Kill" in cause, f"the death cause should say it was killed: {cause!r}")
    check(len(b.texts("tr[data-actor]")) == 1, "the name filter leaves the one actor")
    b.shot("actors")
    # The driver exits after the kill: its job turns SUCCEEDED a moment later, not at once.
    deadline = time.time() + 60
    job = api.job("dashboard-actor")
    while not (job and job["status"] == "SUCCEEDED") and time.time() < deadline:
        time.sleep(0.2)
        job = api.job("dashboard-actor")
    check(job and job["status"] == "SUCCEEDED", f"the actor job: {job}")


def test_training(b, api, program, storage):
    step("a training run's accuracy chart")
    b.open("train")
    b.wait("the first training report", lambda: b.driver.find_elements(
        By.CSS_SELECTOR, '[data-chart="accuracy"] polyline'), 300)

    def accuracy_points():
        lines = b.driver.find_elements(By.CSS_SELECTOR, '[data-chart="accuracy"] polyline')
        return len(lines[0].get_attribute("points").split()) if lines else 0

    b.wait("3 epochs of accuracy and FINISHED",
           lambda: accuracy_points() == 3 and "FINISHED" in b.text("#train-run"), 300)
    check(len(b.driver.find_elements(By.CSS_SELECTOR, '[data-chart="images_per_s"] polyline')) == 1,
          "the images/s chart")
    check("checkpoint_" in b.text("#train-run"), "checkpoints are listed")
    b.js("window.scrollTo(0, 0)")
    b.shot("train")


def test_placement_groups(b):
    step("placement groups: strategy, bundles and where they sit")
    b.open("placement-groups")
    b.wait("the trainer's placement group",
           lambda: "SPREAD" in b.text("main") or "PACK" in b.text("main"), 120)
    b.wait("bundles placed on nodes", lambda: "→ 127.0.0.1" in b.text("main"), 120)
    b.wait("the group's lifetime (its job's)", lambda: "lifetime" in b.text("main").lower()
           and "job 0" in b.text("main"), 30)
    b.shot("placement_groups")
    b.open("overview")  # while the trainer holds CPUs
    b.wait("the overview", lambda: len(b.texts("tr[data-node]")) == 3)
    b.shot("overview")


def test_tasks(b, api, program):
    step("tasks: counters and rate charts while a job runs tasks")
    b.open("tasks")
    b.wait("task samples", lambda: len(b.driver.find_elements(
        By.CSS_SELECTOR, '[data-chart="task-rates"] polyline')) >= 1, 60)
    api.submit("dashboard-tasks", program + " --tasks")

    def card(label):
        for text in b.texts(".card"):
            lines = text.split("\n")
            if lines[0].lower() == label:
                return int(lines[1])
        return 0

    before = card("finished")
    b.wait("finished and failed tasks counted",
           lambda: card("finished") > before + 20 and card("failed") >= 3, 120)
    time.sleep(6)  # a few more samples, for the screenshot
    b.shot("tasks")
    b.wait("the tasks job", lambda: (api.job("dashboard-tasks") or {}).get("status") == "SUCCEEDED", 120)
    test_task_table(b, api)


def task_range(b):
    """The task table's counts: (tasks fetched, tasks matching the filters), from its range line
    ("1–50 of 100 fetched; 331 match ..." or "0 of 0 match")."""
    text = b.text("#task-range")
    if "fetched" not in text:
        return 0, int(text.split(" of ")[1].split()[0]) if " of " in text else -1
    return int(text.split(" of ")[1].split()[0]), int(text.split("; ")[1].split()[0])


def test_task_table(b, api):
    step("tasks: the table, past its first page and its default fetch, and its filters")
    _, body = api.call("GET", "/api/v0/tasks?limit=0")
    total = json.loads(body)["total"]
    check(total > 300, f"the tasks job recorded {total} tasks")
    b.open("tasks")
    b.wait("the first page of 100 fetched",
           lambda: b.text("#task-range").startswith("1–50 of 100 fetched") and
           len(b.texts("#task-table tr[data-task]")) == 50, 30)
    b.driver.find_element(By.ID, "task-next").click()
    b.wait("the second page", lambda: b.text("#task-range").startswith("51–100 of 100"), 30)
    Select(b.driver.find_element(By.ID, "task-limit")).select_by_visible_text("all")
    b.wait("every task fetched", lambda: task_range(b)[0] == task_range(b)[1] >= total, 30)
    Select(b.driver.find_element(By.ID, "task-state")).select_by_value("FAILED")
    b.wait("failed tasks only", lambda: b.texts("#task-table tr[data-task]") and all(
        "FAILED" in row for row in b.texts("#task-table tr[data-task]")), 30)
    failed = task_range(b)[1]
    check(failed >= 30, f"{failed} failed tasks listed, the job failed 30")
    names = b.js("return [...document.querySelectorAll('#task-names option')].map(o => o.value)")
    fail_name = next((n for n in names if "Fail" in n), None)
    check(fail_name is not None, f"no function named like Fail among {names}")
    Select(b.driver.find_element(By.ID, "task-state")).select_by_value("ALL")
    name_box = b.driver.find_element(By.ID, "task-name")
    name_box.send_keys(fail_name + "\n")
    b.wait("one function's tasks", lambda: b.texts("#task-table tr[data-task]") and all(
        fail_name in row for row in b.texts("#task-table tr[data-task]")) and
        task_range(b)[1] == 30, 30)  # one failing task per round, 30 rounds
    b.shot("task_table")

    step("a job's page lists its tasks, actors and placement groups; its timeline")
    b.open("jobs/dashboard-tasks")
    b.wait("the job's tasks", lambda: len(b.texts("#job-tasks tr[data-task]")) > 300, 60)
    check(b.text("#job-tasks-title").startswith("Tasks ("), b.text("#job-tasks-title"))
    b.js("document.getElementById('job-tasks-title').scrollIntoView()")
    b.shot("job_tasks")
    check(len(b.texts("#job-actors tr[data-actor]")) == 0, "the tasks job made no actors")
    _, body = api.call("GET", "/api/v0/jobs")
    drivers = [j for j in json.loads(body) if j.get("submission_id") == "dashboard-tasks" and j["type"] == "DRIVER"]
    check(len(drivers) == 1, f"the submission's driver in /api/v0/jobs: {drivers}")
    submissions = [j for j in json.loads(body) if j.get("submission_id") == "dashboard-tasks" and j["type"] != "DRIVER"]
    check(len(submissions) == 1 and submissions[0].get("job_id") == drivers[0]["job_id"],
          f"the submission names its driver's job: {submissions}")
    b.wait("the timeline link", lambda: b.driver.find_element(By.PARTIAL_LINK_TEXT, "timeline").click() or True)
    b.wait("the job's timeline", lambda: len(b.driver.find_elements(By.CSS_SELECTOR, "#timeline-svg rect")) > 300, 60)
    check(b.driver.find_element(By.ID, "timeline-job").get_attribute("value") == drivers[0]["job_id"],
          "the timeline is filtered to the job")
    b.shot("timeline")


def test_logs(b):
    step("logs: a node's files and one file's tail")
    b.open("logs")
    b.wait("the file list", lambda: b.driver.find_elements(By.CSS_SELECTOR, "#log-files a"))
    b.wait("a click on raylet.log", lambda: b.driver.find_element(
        By.CSS_SELECTOR, '#log-files a[data-file="raylet.log"]').click() or True)
    b.wait("the file's text", lambda: b.text("#log-text").strip() != "", 30)
    b.shot("logs")

    step("logs: search a node's files (the tasks job's failures are in its workers' logs)")
    needle = "fails on PURPOSE"  # any case
    found = 0
    for node in b.js("return [...document.querySelectorAll('#log-node option')].map(o => o.value)"):
        Select(b.driver.find_element(By.ID, "log-node")).select_by_value(node)
        b.wait("the node's view", lambda: b.driver.find_elements(By.CSS_SELECTOR, f'#log-view[data-node="{node}"]'))
        # As typing and Enter would, in one script (a re-render may replace the box meanwhile).
        b.js("const box = document.getElementById('log-search'); box.value = arguments[0];"
             "box.dispatchEvent(new Event('input')); box.dispatchEvent(new Event('change'));", needle)
        b.wait("the search to end", lambda: "lines containing" in b.text("#log-search-summary") and
               "searching" not in b.text("#log-search-summary"), 60)
        lines = b.texts("#log-matches > div")
        check(all(needle.lower() in line.lower() for line in lines), f"a match without the text: {lines[:3]}")
        found += len(lines)
        if lines:
            b.shot("log_search")
            b.wait("a click on a match's file", lambda: b.js(
                "const a = document.querySelector('#log-matches > div a'); if (a) a.click(); return !!a;"))
            b.wait("the matched file", lambda: needle.lower() in b.text("#log-text").lower(), 30)
    check(found >= 1, "no node's logs hold the tasks job's failures")


def test_node_history(b, api):
    step("overview: each node's CPU, memory and object store over time")
    _, body = api.call("GET", "/api/v0/nodes/history")
    history = json.loads(body)
    check(history["window_s"] == 3600 and len(history["nodes"]) == 3, f"history of {list(history['nodes'])}")
    for node, samples in history["nodes"].items():
        check(samples and all(0 <= x["cpu_percent"] <= 100 and 0 < x["memory_used_bytes"] <= x["memory_total_bytes"]
                              for x in samples), f"node {node}: {samples[:2]}")
    # A test cluster lives about a minute: a sample every 10 s gives each node a few.
    check(max(len(x) for x in history["nodes"].values()) >= 2, f"samples: {history['nodes']}")
    b.open("overview")
    for chart in ("node-cpu", "node-memory", "node-store"):
        b.wait(f"the {chart} chart", lambda: len(b.driver.find_elements(
            By.CSS_SELECTOR, f'[data-chart="{chart}"] polyline')) == 3, 30)
    b.js("document.querySelector('[data-chart=\"node-cpu\"]').scrollIntoView()")
    b.shot("node_history")


def test_logout(b, api, session):
    step("logout ends the session")
    b.open("overview")
    b.wait("the logout button", lambda: b.driver.find_element(By.ID, "logout").is_displayed())
    b.driver.find_element(By.ID, "logout").click()
    b.wait("the login form", lambda: b.driver.find_element(By.ID, "login").is_displayed())
    status, _ = api.call("GET", "/api/v0/nodes", auth=False, headers={
        "Cookie": "troupe_session=" + session, "Sec-Fetch-Site": "same-origin"})
    check(status == 401, f"the logged-out cookie still works: {status}")


def main():
    parser = argparse.ArgumentParser()
    for flag in ("url", "token", "screenshots", "actor-program", "train-program", "storage"):
        parser.add_argument("--" + flag, required=True)
    args = parser.parse_args()
    api = Api(args.url, args.token)
    b = Browser(args.url, args.screenshots)
    try:
        session = test_login(b, api, args.token)
        test_hostile_requests(b, api, session)
        test_overview(b)
        # Training takes longest: it runs while the other pages are checked.
        api.submit("dashboard-train",
                   f"{args.train_program} --num-workers=2 --epochs=3 --limit-batches=15 "
                   f"--test-limit=1000 --batch-size=64 --name=dashboard-mlp "
                   f"--storage-path={args.storage}")
        test_placement_groups(b)
        test_job_logs_live(b, api)
        test_actor_death(b, api, args.actor_program)
        test_stop_button(b, api)
        test_training(b, api, args.train_program, args.storage)
        b.open("jobs")
        b.wait("the jobs list", lambda: len(b.texts("tr[data-job]")) >= 4)
        b.shot("jobs")
        test_tasks(b, api, args.actor_program)
        test_logs(b)
        test_node_history(b, api)
        test_logout(b, api, session)
        step("all dashboard checks passed")
    finally:
        b.driver.quit()


if __name__ == "__main__":
    main()
