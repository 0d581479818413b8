"""The console as a person meets it: the real reconciler API process on its own database with a day
that has a case, the console process on its own database with four operators (three of merchant m1,
one of every merchant), and a real headless Chromium (Debian's ``chromium`` + ``chromium-driver``,
driven by Selenium)."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from backbone.testing import databases
from backbone.testing.browser import chromium
from backbone.testing.processes import Proc, wait_until
from backbone.testing.stack import Stack, free_port
from backbone.tokens import token_hash
from reconciler.testing.world import World

HERE = Path(__file__).resolve()
CONSOLE_MIGRATIONS = HERE.parents[2] / "migrations"
RECON_MIGRATIONS = HERE.parents[3] / "reconciler" / "migrations"
CONSOLE_TOKEN = "console-token-0123456789abcdef"
PASSWORD = "correct horse battery staple"
OPERATORS = {  # name -> (permissions, merchants)
    "alice": ("view,case_work,repair_propose,repair_approve", "m1"),
    "bob": ("view,repair_approve", "m1"),
    "carol": ("view", "m1"),
    "root": ("view,case_work", "*"),  # every merchant
}
SCREENSHOTS = Path(os.environ.get("CONSOLE_SCREENSHOTS", "/tmp/console-screenshots"))  # noqa: S108 - dev only


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


@dataclass
class Console:
    base: str
    world: World
    db_url: str
    proc: Proc
    recon: Proc
    password: str = PASSWORD
    screenshots: Path = SCREENSHOTS


@pytest.fixture
def console(stack: Stack, tmp_path: Path) -> Iterator[Console]:
    recon_url = databases.create_database(stack.pg_admin_url, [RECON_MIGRATIONS], prefix="recon")
    console_url = databases.create_database(stack.pg_admin_url, [CONSOLE_MIGRATIONS], prefix="console")
    world = World(recon_url)
    tokens = tmp_path / "recon-tokens"
    tokens.write_text(
        "console cases:view,cases:work,repairs:propose,repairs:approve,operators:assert"
        f" sha256:{token_hash(CONSOLE_TOKEN)}\n"
    )
    recon_port, port = free_port(), free_port()
    recon = Proc(
        ["-m", "reconciler", "api"],
        {
            "DATABASE_URL": recon_url,
            "RECON_HTTP_PORT": str(recon_port),
            "RECON_HTTP_HOST": "127.0.0.1",
            "RECON_API_TOKENS_FILE": str(tokens),
        },
        tmp_path / "recon.log",
    )
    env = {**os.environ, "DATABASE_URL": console_url}
    for name, (permissions, merchant) in OPERATORS.items():
        subprocess.run(
            [
                *(sys.executable, "-m", "ops_console", "users", "add", name),
                *("--permissions", permissions, "--merchant", merchant, "--display-name", name.title()),
            ],
            input=PASSWORD + "\n",
            text=True,
            env=env,
            check=True,
            capture_output=True,
        )
    proc = Proc(
        ["-m", "ops_console", "serve"],
        {
            "DATABASE_URL": console_url,
            "CONSOLE_HTTP_HOST": "127.0.0.1",
            "CONSOLE_HTTP_PORT": str(port),
            "CONSOLE_RECONCILER_URL": f"http://127.0.0.1:{recon_port}",
            "CONSOLE_RECONCILER_TOKEN": CONSOLE_TOKEN,
            "CONSOLE_COOKIE_SECURE": "false",  # plain http on 127.0.0.1 in the test only
        },
        tmp_path / "console.log",
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _answers(f"http://127.0.0.1:{recon_port}/readyz"), 30, "reconciler API")
        wait_until(lambda: _answers(f"{base}/readyz"), 30, "console", alive=lambda: proc.popen.poll() is None)
        yield Console(base, world, console_url, proc, recon)
    finally:
        assert proc.terminate() == 0, proc.logs()[-2000:]
        assert recon.terminate() == 0
        world.close()
        databases.drop_database(stack.pg_admin_url, console_url)
        databases.drop_database(stack.pg_admin_url, recon_url)


@pytest.fixture
def browser() -> Iterator[object]:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with chromium() as driver:
        yield driver
