"""Drives real headless Chromium over the DevTools protocol (stdlib only) through the lachesis
dashboard, for tests/it/dashboard.rs. Reads a JSON plan from argv[1], prints a JSON report.

Modes: "check" (login, pages, badges, live refresh, log tail, regression marker, screenshots),
"screens" (pages by path, their text and screenshots, and per page an optional probe: a
JavaScript expression evaluated once it loaded) and "bench" (navigation timing of the runs page)."""

import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request


class Cdp:
    """A minimal DevTools client: one page target over one websocket."""

    def __init__(self, ws_url):
        rest = ws_url[len("ws://"):]
        host_port, path = rest.split("/", 1)
        host, port = host_port.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (f"GET /{path} HTTP/1.1\r\nHost: {host_port}\r\nUpgrade: websocket\r\n"
             f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.sock.recv(1)
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise RuntimeError(f"websocket refused: {head!r}")
        self.next_id = 0

    def _send(self, data):
        header = bytearray([0x81])
        n = len(data)
        if n < 126:
            header.append(0x80 | n)
        elif n < 65536:
            header.append(0x80 | 126)
            header += struct.pack(">H", n)
        else:
            header.append(0x80 | 127)
            header += struct.pack(">Q", n)
        mask = os.urandom(4)
        header += mask
        self.sock.sendall(bytes(header) + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _exact(self, n):
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise RuntimeError("websocket closed")
            out += chunk
        return out

    def _message(self):
        parts = b""
        while True:
            b0, b1 = self._exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._exact(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._exact(8))[0]
            payload = self._exact(n)
            opcode = b0 & 0x0F
            if opcode == 9:  # ping
                continue
            parts += payload
            if b0 & 0x80:
                return json.loads(parts)

    def call(self, method, **params):
        self.next_id += 1
        wanted = self.next_id
        self._send(json.dumps({"id": wanted, "method": method, "params": params}).encode())
        while True:
            message = self._message()
            if message.get("id") == wanted:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def eval(self, expression):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return result.get("result", {}).get("value")

    def wait(self, expression, timeout=20.0, what=None):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.eval(expression)
            if value:
                return value
            time.sleep(0.01)
        raise RuntimeError(f"timed out waiting for {what or expression}")

    def open(self, url):
        self.eval(f"location.href = {json.dumps(url)}; true")
        time.sleep(0.05)
        self.wait(f"document.readyState === 'complete' && location.href.startsWith({json.dumps(url.split('?')[0])})",
                  what=f"{url} to load")

    def screenshot(self, path, whole_page=True):
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=whole_page)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        return path


def start_chromium(profile):
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    proc = subprocess.Popen(
        [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1280,900", f"--user-data-dir={profile}",
         "--remote-debugging-port=0", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    port_file = os.path.join(profile, "DevToolsActivePort")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if os.path.exists(port_file):
            lines = open(port_file).read().split()
            if lines:
                port = lines[0]
                targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list"))
                page = next(t for t in targets if t["type"] == "page")
                return proc, Cdp(page["webSocketDebuggerUrl"])
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("chromium did not open its DevTools port")


def api(plan, method, path, body=None):
    request = urllib.request.Request(plan["base"] + path, method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Authorization": f"Bearer {plan['token']}", "Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(request))


def check(plan, cdp):
    base, out, report = plan["base"], plan["out"], {}
    # Without the token: the login prompt, and no run ids.
    cdp.open(base + "/ui/runs")
    text = cdp.eval("document.body.innerText")
    report["anonymous_login"] = "Sign in" in text
    report["anonymous_leaks"] = [r for r in plan["run_ids"] if r[:8] in cdp.eval("document.documentElement.outerHTML")]
    report["screenshot_login"] = cdp.screenshot(os.path.join(out, "login.png"))
    cdp.eval(f"document.querySelector('input[name=token]').value = {json.dumps(plan['token'])};"
             "document.querySelector('.login form').submit(); true")
    cdp.wait("location.pathname === '/ui/runs' && document.readyState === 'complete' && !!document.querySelector('table.runs')",
             what="the runs page after login")
    report["rows"] = cdp.eval("Object.fromEntries([...document.querySelectorAll('tr[data-run]')]"
                              ".map(r => [r.dataset.run, r.querySelector('.badge').textContent]))")
    report["screenshot_runs"] = cdp.screenshot(os.path.join(out, "runs.png"))
    # Live refresh: a run queued after the page opened appears without a reload.
    cdp.eval("window.__sameDocument = true; true")
    cdp.wait("document.getElementById('live').textContent === 'live'", what="the change feed to open")
    queued_at = time.monotonic()
    new_run = api(plan, "POST", "/runs", {"workflow": plan["live_workflow"]})["id"]
    cdp.wait(f"!!document.querySelector('tr[data-run=\"{new_run}\"]')", what="the new run's row")
    report["live_row_ms"] = round((time.monotonic() - queued_at) * 1000)
    report["live_without_reload"] = cdp.eval("window.__sameDocument === true")
    report["live_run"] = new_run
    # The running run's progress bar moves without a reload.
    fraction = ("(() => { const p = document.querySelector('tr[data-run=\"%s\"] .progress');"
                " return p ? +p.dataset.fraction : -1 })()" % plan["running"])
    cdp.wait(fraction + " > 0", what="the running run's progress")
    first = cdp.eval(fraction)
    report["progress_first"] = first
    cdp.wait(fraction + " > %r" % first, what="the progress bar to advance")
    report["progress_later"] = cdp.eval(fraction)
    report["progress_without_reload"] = cdp.eval("window.__sameDocument === true")
    # One run: a bar per stage, the log tail, then a line written after the page opened.
    cdp.open(f"{base}/ui/runs/{plan['running']}")
    report["stage_bars"] = cdp.eval("document.querySelectorAll('.stage-bar').length")
    report["stages"] = cdp.eval("document.querySelectorAll('.tab').length")
    report["step_chart_series"] = cdp.eval("document.querySelectorAll('.step-chart .series').length")
    cdp.eval(f"document.querySelectorAll('.tab')[{plan['log_tab']}].click(); true")
    cdp.wait(f"document.getElementById('log').textContent.includes({json.dumps(plan['log_opening'])})",
             what="the log tail to open")
    marker = f"dashboard-marker-{time.time_ns()}"
    written_at = time.monotonic()
    with open(plan["log_path"], "a") as log:
        log.write(marker + "\n")
    cdp.wait(f"document.getElementById('log').textContent.includes({json.dumps(marker)})", what="the new log line")
    report["log_delay_ms"] = round((time.monotonic() - written_at) * 1000)
    report["screenshot_run"] = cdp.screenshot(os.path.join(out, "run.png"))
    cdp.open(f"{base}/ui/runs/{plan['failed']}")
    report["failed_stage_bars"] = cdp.eval("document.querySelectorAll('.stage-bar').length")
    report["screenshot_failed_run"] = cdp.screenshot(os.path.join(out, "run-failed.png"))
    # Schedules: the regression marker against the baseline of the same chart.
    cdp.open(base + "/ui/schedules")
    report["regression"] = cdp.eval(
        "(() => { const m = document.querySelector('circle.regression'), b = document.querySelector('line.baseline');"
        " return m && b ? {marker_y: +m.getAttribute('cy'), baseline_y: +b.getAttribute('y1')} : null })()")
    report["screenshot_schedules"] = cdp.screenshot(os.path.join(out, "schedules.png"))
    cdp.open(base + "/ui/tests")
    report["accuracy_bars"] = cdp.eval("document.querySelectorAll('rect.bar').length")
    report["screenshot_tests"] = cdp.screenshot(os.path.join(out, "tests.png"))
    cdp.open(base + "/ui/nodes")
    report["screenshot_nodes"] = cdp.screenshot(os.path.join(out, "nodes.png"))
    return report


def login(plan, cdp):
    cdp.open(plan["base"] + "/ui/login")
    cdp.eval(f"document.querySelector('input[name=token]').value = {json.dumps(plan['token'])};"
             "document.querySelector('.login form').submit(); true")
    cdp.wait("location.pathname === '/ui/runs' && document.readyState === 'complete'", what="login")


def screens(plan, cdp):
    login(plan, cdp)
    report = {}
    probes = plan.get("probes", {})
    for name, path in plan["pages"].items():
        cdp.open(plan["base"] + path)
        report[name] = {"text": cdp.eval("document.getElementById('main').innerText"),
                        "screenshot": cdp.screenshot(os.path.join(plan["out"], f"{name}.png"))}
        if name in probes:
            # What the page drew, as the browser laid it out (an expression of the plan's).
            report[name]["probe"] = cdp.eval(probes[name])
    return report


def bench(plan, cdp):
    login(plan, cdp)
    samples = []
    for _ in range(plan.get("rounds", 5)):
        cdp.open(plan["base"] + "/ui/runs")
        cdp.wait("performance.getEntriesByType('navigation')[0].loadEventEnd > 0", what="load timing")
        samples.append(cdp.eval(
            "(() => { const n = performance.getEntriesByType('navigation')[0];"
            " return {ttfb: n.responseStart - n.requestStart, load: n.loadEventEnd - n.startTime,"
            " response_end: n.responseEnd - n.startTime, dom_ready: n.domContentLoadedEventEnd - n.startTime,"
            " rows: document.querySelectorAll('tr[data-run]').length,"
            " next_page: [...document.querySelectorAll('a')].some(a => a.textContent === 'next')} })()"))
    samples.sort(key=lambda s: s["load"])
    median = samples[len(samples) // 2]
    return {"ttfb_ms": round(median["ttfb"], 1), "load_ms": round(median["load"], 1), "rows": median["rows"],
            "next_page": median["next_page"],
            "samples": samples, "screenshot_runs_1000": cdp.screenshot(os.path.join(plan["out"], "runs-1000.png"), whole_page=False)}


def main():
    plan = json.load(open(sys.argv[1]))
    profile = tempfile.mkdtemp(prefix="lachesis-chromium-")
    proc, cdp = start_chromium(profile)
    try:
        report = {"bench": bench, "screens": screens, "check": check}[plan["mode"]](plan, cdp)
        print(json.dumps(report))
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    main()
