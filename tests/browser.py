"""Headless Chromium (Debian's ``chromium``) driven over the DevTools protocol: set a cookie, open a page, wait
for a JavaScript condition, take a PNG screenshot. Used to check pages as a browser renders them."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from support import free_port, terminate


class Browser:
    def __init__(self, width: int = 1400, height: int = 1000):
        binary = shutil.which("chromium") or shutil.which("chromium-browser")
        if binary is None:
            raise RuntimeError("chromium is not installed (scripts/setup installs Debian's chromium)")
        self.profile = tempfile.mkdtemp(prefix="logbus-chromium-")
        self.port = free_port()
        self.proc = subprocess.Popen(
            [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", f"--remote-debugging-port={self.port}", "--remote-debugging-address=127.0.0.1",
             f"--window-size={width},{height}", f"--user-data-dir={self.profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.ws = None
        self.next_id = 0

    def __enter__(self) -> "Browser":
        from websockets.sync.client import connect

        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/list", timeout=2) as r:
                    pages = [p for p in json.load(r) if p["type"] == "page"]
                if pages:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("chromium's DevTools endpoint did not come up")
            time.sleep(0.2)
        self.ws = connect(pages[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=10)
        return self

    def __exit__(self, *exc) -> None:
        if self.ws is not None:
            self.ws.close()
        terminate(self.proc, 10)
        shutil.rmtree(self.profile, ignore_errors=True)

    def call(self, method: str, **params) -> dict:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=30))
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def set_cookie(self, url: str, name: str, value: str) -> None:
        self.call("Network.enable")
        self.call("Network.setCookie", name=name, value=value, url=url)

    def open(self, url: str) -> None:
        self.call("Page.enable")
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str):
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 60):
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"page condition not met within {timeout}s: {expression}")
            time.sleep(0.25)

    def screenshot(self, path: Path) -> bytes:
        data = base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])
        Path(path).write_bytes(data)
        return data
