#!/usr/bin/env python3
"""Loads the example page in headless Chromium through ChromeDriver (WebDriver over
HTTP, standard library only), waits for the result, prints it and saves a screenshot.
Exits 1 unless the page reports success.

    python3 examples/web/check.py http://127.0.0.1:8000/ [page.png]
    python3 examples/web/check.py examples/web [page.png]   # serves the folder itself

Env: CHROMEDRIVER (default /usr/bin/chromedriver), WEBGPU=0 to launch without WebGPU.
"""

import base64
import functools
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(directory):
    """Serves `directory` on localhost from a background thread; returns its URL."""
    handler = functools.partial(QuietHandler, directory=directory)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/"


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def call(base, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)["value"]


def main():
    url = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000/"
    if not url.startswith("http"):
        url = serve(url)
    png = sys.argv[2] if len(sys.argv) > 2 else None
    args = ["--headless=new", "--no-sandbox", "--window-size=1000,560",
            "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"]
    if os.environ.get("WEBGPU", "1") != "0":
        args.append("--enable-unsafe-webgpu")
    port = free_port()
    driver = subprocess.Popen(
        [os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver"), f"--port={port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                call(base, "GET", "/status")
                break
            except OSError:
                time.sleep(0.1)
        caps = {"capabilities": {"alwaysMatch": {"goog:chromeOptions": {"args": args}}}}
        session = call(base, "POST", "/session", caps)["sessionId"]
        s = f"/session/{session}"
        try:
            call(base, "POST", s + "/url", {"url": url})
            script = ("const e = document.getElementById('result');"
                      "return [e.dataset.status || '', e.textContent];")
            deadline = time.time() + 120
            status, text = "", ""
            while time.time() < deadline:
                status, text = call(base, "POST", s + "/execute/sync",
                                    {"script": script, "args": []})
                if status:
                    break
                time.sleep(0.25)
            print(text)
            if png:
                with open(png, "wb") as f:
                    f.write(base64.b64decode(call(base, "GET", s + "/screenshot")))
        finally:
            call(base, "DELETE", s)
    finally:
        driver.terminate()
        driver.wait()
    print(f"page status: {status or 'timed out'}")
    return 0 if status == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
