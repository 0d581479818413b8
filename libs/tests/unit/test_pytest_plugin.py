"""The suite's budget and its leftover check fail a run, naming the cause: an inner pytest run of a
few made-up tests, in a process of its own, with the shared plugin."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

PLUGIN = ["-p", "backbone.testing.pytest_plugin", "-p", "no:cacheprovider"]


def test_a_test_over_its_budget_fails_the_run_and_is_named(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every test passes, but one took longer than ``TEST_BUDGET_TEST_S``: the run fails, and its
    last lines name that test and its time; a quick one is not named."""
    pytester.makepyfile(
        test_inner="""
        import time

        def test_slow():
            time.sleep(1.2)

        def test_quick():
            pass
        """
    )
    monkeypatch.setenv("TEST_BUDGET_TEST_S", "1")
    result = pytester.runpytest_subprocess(*PLUGIN)
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["budget: test_inner.py::test_slow took 1.* s (setup, call and teardown), over 1 s"]
    )
    assert "test_quick took" not in result.stdout.str()


def test_a_long_test_has_the_long_budget_and_a_quick_run_passes(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test marked ``long`` is judged by ``TEST_BUDGET_LONG_S``, not the short budget: the same
    1.2 s passes, and so does the run."""
    pytester.makepyfile(
        test_inner="""
        import time
        import pytest

        @pytest.mark.long
        def test_slow():
            time.sleep(1.2)
        """
    )
    monkeypatch.setenv("TEST_BUDGET_TEST_S", "1")
    result = pytester.runpytest_subprocess(*PLUGIN)
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.OK
    assert "budget:" not in result.stdout.str()


def test_a_process_a_test_left_running_is_killed_and_fails_the_run(pytester: pytest.Pytester) -> None:
    """A test starts a process and never stops it: when the run ends the process is named and
    killed, and the run fails although every test passed."""
    pytester.makepyfile(
        test_inner="""
        import pathlib
        import subprocess

        def test_forgets_its_child():
            child = subprocess.Popen(["sleep", "300"])
            pathlib.Path("child.pid").write_text(str(child.pid))
        """
    )
    result = pytester.runpytest_subprocess(*PLUGIN)
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["leftover: pid * of this test run is still alive (killed): sleep 300*"])
    stat = Path(f"/proc/{int((pytester.path / 'child.pid').read_text())}/stat")
    # killed: reaped and gone, or a zombie until someone reaps it
    assert not stat.exists() or stat.read_text().split(") ")[1][0] in "ZX"
