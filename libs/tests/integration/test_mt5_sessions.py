"""The gateway's session life against the simulator as a real process: re-authentication after the
server's idle drop, pings that prevent it, a simulator killed and restarted on the same database
(state survives, the gateway reconnects by itself), a wrong password, and HTTPS.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from backbone.mt5 import AccountInfo, Applied, DealType, Found, Mt5Gateway, NoAnswer, ServerTime
from backbone.mt5.testing import SimulatorProcess, running_simulator
from backbone.settings import Secret
from backbone.testing.stack import Stack

USD = "real\\usd"
LOGIN = 7101
BAL = DealType.BALANCE


def seed(sim: SimulatorProcess) -> None:
    sim.control.create_group(USD, "USD", 2)
    sim.control.create_account(LOGIN, USD, balance="0")


def test_reauthentication_after_idle_drop_and_pings_that_prevent_it(stack: Stack, tmp_path: Path) -> None:
    """The server drops connections silent for 400 ms (180 s by default). A gateway that does not
    ping in time finds its session gone and transparently opens a new one; a gateway that pings more
    often than the idle limit keeps its first session."""
    with running_simulator(stack.pg_admin_url, tmp_path, MT5_SIM_IDLE_TIMEOUT_MS="400") as sim:
        seed(sim)
        with (
            Mt5Gateway(sim.gateway_settings(ping_interval_ms=60_000), name="lazy") as lazy,
            Mt5Gateway(sim.gateway_settings(ping_interval_ms=100), name="pinging") as pinging,
        ):
            assert isinstance(lazy.account(LOGIN), AccountInfo)
            assert isinstance(pinging.account(LOGIN), AccountInfo)
            assert (lazy.session_generation, pinging.session_generation) == (1, 1)
            time.sleep(1.2)
            assert '"webapi.idle_drop"' in sim.logs()
            assert isinstance(lazy.balance(LOGIN, 100, "USD", BAL, "dep:idle", check_margin=False), Applied)
            assert isinstance(pinging.account(LOGIN), AccountInfo)
            assert lazy.session_generation >= 2  # re-authenticated (the keeper may have done it first)
            assert pinging.session_generation == 1


def test_state_survives_a_killed_simulator_and_the_gateway_reconnects(stack: Stack, tmp_path: Path) -> None:
    """A credit, then SIGKILL: while the simulator is down a balance call cannot connect and says so
    (NoAnswer, sent=False). Restarted on the same database, the deal is still there, the gateway
    re-authenticates by itself, finds the deal, and the next ticket is larger."""
    with running_simulator(stack.pg_admin_url, tmp_path) as sim:
        seed(sim)
        with Mt5Gateway(sim.gateway_settings(reconnect_backoff_max_ms=200)) as mt5:
            first = mt5.balance(LOGIN, 4_200, "USD", BAL, "dep:before", check_margin=False)
            assert isinstance(first, Applied)
            sim.kill()
            down = mt5.balance(LOGIN, 100, "USD", BAL, "dep:down", check_margin=False)
            assert down == NoAnswer("connect_failed", sent=False)
            sim.start()
            now = mt5.server_time()
            assert isinstance(now, ServerTime)
            found = mt5.find_balance_deal(
                LOGIN, "dep:before", 4_200, "USD", BAL, now.epoch_s - 600, now.epoch_s
            )
            assert found == Found(first.ticket)
            second = mt5.balance(LOGIN, 100, "USD", BAL, "dep:after", check_margin=False)
            assert isinstance(second, Applied) and second.ticket > first.ticket
            assert sim.control.account(LOGIN)["balance"] == "43.00"
            assert [d["Comment"] for d in sim.control.deals(login=LOGIN)] == ["dep:before", "dep:after"]


def test_wrong_password_is_refused_and_nothing_is_sent(stack: Stack, tmp_path: Path) -> None:
    """With a wrong password the server answers 3006 to auth/answer: calls are NoAnswer with
    sent=False (the balance request never left), and no deal exists."""
    with running_simulator(stack.pg_admin_url, tmp_path) as sim:
        seed(sim)
        with Mt5Gateway(sim.gateway_settings(manager_password=Secret("wrong"))) as mt5:
            assert mt5.balance(LOGIN, 100, "USD", BAL, "dep:pw", check_margin=False) == NoAnswer(
                "auth_refused", 3006, sent=False
            )
        assert sim.control.deals() == []


def _self_signed(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


def test_https_with_a_verified_certificate(stack: Stack, tmp_path: Path) -> None:
    """Over HTTPS (the real server's only transport) the gateway verifies the server certificate
    against the CA file and credits as over HTTP; without trusting it, it cannot connect."""
    cert, key = _self_signed(tmp_path)
    tls = {"MT5_SIM_TLS_CERT_FILE": str(cert), "MT5_SIM_TLS_KEY_FILE": str(key)}
    with running_simulator(stack.pg_admin_url, tmp_path, **tls) as sim:
        seed(sim)
        assert sim.url.startswith("https://")
        with Mt5Gateway(sim.gateway_settings(tls_ca_file=str(cert))) as mt5:
            assert isinstance(mt5.balance(LOGIN, 100, "USD", BAL, "dep:tls", check_margin=False), Applied)
        with Mt5Gateway(sim.gateway_settings()) as untrusting:
            assert untrusting.server_time() == NoAnswer("connect_failed", sent=False)
