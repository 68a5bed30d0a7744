"""Debian's headless Chromium driven over the Chrome DevTools Protocol (a websocket, aiohttp's
client): open a URL, evaluate JavaScript, wait for a condition with a deadline, take a PNG, and
collect what the page reported as errors (uncaught exceptions, console.error).

No driver download: `chromium` from the distribution (.ci/run installs it), a throwaway profile,
and the DevTools port the browser picks itself (read from its DevToolsActivePort file).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

START_TIMEOUT_S = 20.0
# The profile directory is removed within this after the browser and its helpers are gone.
PROFILE_REMOVE_TIMEOUT_S = 5.0
POLL_S = 0.1


def chromium_binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    def __init__(self, width: int = 1280, height: int = 900):
        self.size = (width, height)
        self.profile = tempfile.TemporaryDirectory(prefix="qr-chromium-")
        self.process: subprocess.Popen | None = None
        self.session: aiohttp.ClientSession | None = None
        self.ws: aiohttp.ClientWebSocketResponse | None = None
        self.errors: list[str] = []
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future] = {}
        self._reader: asyncio.Task | None = None

    async def __aenter__(self) -> "Browser":
        binary = chromium_binary()
        if binary is None:
            raise RuntimeError("chromium is not installed (apt-get install chromium; .ci/run does it)")
        self.process = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-default-apps", "--mute-audio", "--remote-debugging-port=0",
             f"--user-data-dir={self.profile.name}", f"--window-size={self.size[0]},{self.size[1]}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            # Its own process group: the helpers it forks (zygote, crashpad) end with it.
            start_new_session=True)
        port = await self._devtools_port()
        self.session = aiohttp.ClientSession()
        async with self.session.get(f"http://127.0.0.1:{port}/json/list") as answer:
            targets = await answer.json(content_type=None)
        page = next(t for t in targets if t.get("type") == "page")
        self.ws = await self.session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=64 * 1024 * 1024)
        self._reader = asyncio.create_task(self._read())
        for domain in ("Page.enable", "Runtime.enable"):
            await self.send(domain)
        return self

    async def __aexit__(self, *exc) -> None:
        if self._reader is not None:
            self._reader.cancel()
        if self.ws is not None:
            await self.ws.close()
        if self.session is not None:
            await self.session.close()
        if self.process is not None:
            self._signal_group(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self.process.wait()
            self._signal_group(signal.SIGKILL)  # helpers still alive after the browser left
        self._remove_profile()

    def _signal_group(self, signum: int) -> None:
        try:
            os.killpg(self.process.pid, signum)
        except ProcessLookupError:
            pass

    def _remove_profile(self) -> None:
        """A helper that was still writing into the profile as it died can leave a file behind the
        first removal saw ("Directory not empty"): remove again until it is gone."""
        deadline = time.monotonic() + PROFILE_REMOVE_TIMEOUT_S
        while True:
            try:
                self.profile.cleanup()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    async def _devtools_port(self) -> int:
        marker = Path(self.profile.name) / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.process.returncode}")
            if marker.exists():
                lines = marker.read_text().split("\n")
                if lines and lines[0].strip().isdigit():
                    return int(lines[0])
            await asyncio.sleep(POLL_S)
        raise RuntimeError(f"chromium did not open its DevTools port in {START_TIMEOUT_S} s")

    async def _read(self) -> None:
        async for message in self.ws:
            data = json.loads(message.data)
            if "id" in data:
                future = self._waiting.pop(data["id"], None)
                if future is not None and not future.done():
                    future.set_result(data)
            elif data.get("method") == "Runtime.exceptionThrown":
                details = data["params"]["exceptionDetails"]
                self.errors.append(details.get("exception", {}).get("description") or details.get("text"))
            elif data.get("method") == "Runtime.consoleAPICalled" and data["params"]["type"] == "error":
                self.errors.append(" ".join(str(arg.get("value", arg.get("description"))) for arg in data["params"]["args"]))

    async def send(self, method: str, **params: Any) -> dict:
        call_id = next(self._ids)
        future = asyncio.get_running_loop().create_future()
        self._waiting[call_id] = future
        await self.ws.send_str(json.dumps({"id": call_id, "method": method, "params": params}))
        answer = await asyncio.wait_for(future, timeout=30)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer["result"]

    async def open(self, url: str) -> None:
        await self.send("Page.navigate", url=url)

    async def evaluate(self, expression: str) -> Any:
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, expression: str, timeout_s: float = 15.0) -> Any:
        """Polls until the expression is true, a non-empty string or a node; its value, or an error naming it and the page's text."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                value = await self.evaluate(expression)
            except RuntimeError:  # mid-navigation: the context is being replaced
                value = None
            if value not in (None, False, "", 0):  # a DOM node comes back as {}: found
                return value
            if time.monotonic() > deadline:
                text = await self.evaluate("document.body ? document.body.innerText : ''")
                raise AssertionError(f"not true within {timeout_s} s: {expression}\npage text:\n{text}")
            await asyncio.sleep(POLL_S)

    async def screenshot(self, path: Path) -> Path:
        shot = await self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path
