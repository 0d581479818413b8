"""Real processes for crash tests: start with env, wait for a log line, SIGTERM or SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path


class Proc:
    """A child Python process whose stderr (JSON logs) goes to a file we can search."""

    def __init__(self, args: list[str], env: Mapping[str, str], log_path: Path) -> None:
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.popen = subprocess.Popen(
            [sys.executable, *args], env={**os.environ, **env}, stdout=self._log, stderr=subprocess.STDOUT
        )

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, needle: str, timeout_s: float = 60.0) -> None:
        wait_until(
            lambda: needle in self.logs(),
            timeout_s,
            f"{needle!r} in {self.log_path}",
            alive=lambda: self.popen.poll() is None,
        )

    def terminate(self, timeout_s: float = 30.0) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
        try:
            return self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            return self.popen.wait(10)
        finally:
            self._log.close()

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(10)
        self._log.close()

    def wait_exit(self, timeout_s: float = 60.0) -> int:
        code = self.popen.wait(timeout_s)
        self._log.close()
        return code


def wait_until(
    predicate: Callable[[], bool],
    timeout_s: float,
    what: str,
    *,
    interval_s: float = 0.1,
    alive: Callable[[], bool] | None = None,
) -> None:
    """Poll ``predicate`` until true; fail with ``what`` on timeout (or when ``alive`` turns false)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        if alive is not None and not alive():
            if predicate():
                return
            raise AssertionError(f"process exited while waiting for {what}")
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
