"""stripe-mock (Stripe's official mock server) for the Stripe adapter's contract tests.

``deploy/stripe-mock/stripe-mock.sh path`` builds the pinned version once (``go install`` through
the Go module proxy, cached under ``.local/stripe-mock/``); each test session starts its own copy on
a free port and stops it at the end, so nothing is shared with other sessions or engineers.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from backbone.testing.stack import free_port

SCRIPT: Final = Path(__file__).resolve().parents[4] / "deploy" / "stripe-mock" / "stripe-mock.sh"
BUILD_TIMEOUT_S: Final = 420
START_TIMEOUT_S: Final = 30.0
API_KEY: Final = "sk_test_123"  # stripe-mock accepts any key of this shape


class StripeMockUnavailable(Exception):
    """The binary could not be built here (no Go toolchain, no module proxy); the message says why."""


@dataclass(frozen=True, slots=True)
class StripeMock:
    base_url: str
    api_key: str = API_KEY


def binary() -> Path:
    """The stripe-mock binary, built first if needed; StripeMockUnavailable if it cannot be."""
    try:
        done = subprocess.run(
            ["bash", str(SCRIPT), "path"],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StripeMockUnavailable(f"building stripe-mock failed: {exc}") from exc
    path = (
        Path(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 and done.stdout.strip() else None
    )
    if path is None or not path.is_file():
        raise StripeMockUnavailable(f"building stripe-mock failed: {done.stderr.strip()[-500:]}")
    return path


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@contextmanager
def running(log_path: Path) -> Iterator[StripeMock]:
    """One stripe-mock on a free loopback port for the ``with`` block."""
    path = binary()
    port, https_port = free_port(), free_port()
    # Without -https-addr it also takes 12112 for HTTPS: a second mock (another xdist worker's)
    # would die on "address already in use".
    command = [str(path), "-http-addr", f"127.0.0.1:{port}", "-https-addr", f"127.0.0.1:{https_port}"]
    with log_path.open("ab") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while not _answers(port):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise StripeMockUnavailable(f"stripe-mock did not start; see {log_path}")
                time.sleep(0.1)
            yield StripeMock(f"http://127.0.0.1:{port}")
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
