"""Unit tests of backbone.settings: typed settings from the environment, failing fast and loudly.

A service must refuse to start on a bad configuration, name every bad variable at once, and never
print a secret. These tests prove each conversion, the combined error, the exit path entrypoints
use, and that secrets stay hidden in reprs and error messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from backbone.settings import (
    Secret,
    SettingsError,
    describe,
    environment,
    http_url,
    load_settings,
    load_settings_or_exit,
    setting,
    terminal_token,
)


@dataclass(frozen=True)
class _Settings:
    name: str = setting("T_NAME", doc="service name")
    port: int = setting("T_PORT", doc="HTTP port")
    debug: bool = setting("T_DEBUG")
    password: Secret = setting("T_PASSWORD", secret=True, doc="database password")
    data_dir: Path = setting("T_DATA_DIR")
    topics: tuple[str, ...] = setting("T_TOPICS", doc="comma-separated topics")
    timeout_ms: int = setting("T_TIMEOUT_MS", 500)
    group: str | None = setting("T_GROUP", None)
    batch_size_max: int | None = setting("T_BATCH_SIZE_MAX", None)
    api_token: Secret = setting("T_API_TOKEN", Secret("default-token"), secret=True)
    derived: int = 0  # no setting(): not read from the environment, not described


@dataclass(frozen=True)
class _SecretNumber:
    pin: int = setting("T_PIN", secret=True)


@dataclass(frozen=True)
class _FloatSetting:
    ratio: float = setting("T_RATIO")


REQUIRED = ["T_NAME", "T_PORT", "T_DEBUG", "T_PASSWORD", "T_DATA_DIR", "T_TOPICS"]
ENV = {
    "T_NAME": "relay",
    "T_PORT": "8080",
    "T_DEBUG": "true",
    "T_PASSWORD": "s3cr3t-pw",
    "T_DATA_DIR": "/var/lib/relay",
    "T_TOPICS": "payments.events, ledger.events,,",
}


def _problems(environ: dict[str, str], cls: type = _Settings) -> SettingsError:
    with pytest.raises(SettingsError) as exc_info:
        load_settings(cls, environ)
    return exc_info.value


# --- conversions -------------------------------------------------------------------------------


def test_every_type_is_converted() -> None:
    """str, int, bool, Secret, Path and tuple[str, ...] come out typed; blanks in lists are dropped;
    unset optional fields take their defaults; fields without setting() keep theirs."""
    loaded = load_settings(_Settings, ENV)
    assert loaded.name == "relay"
    assert loaded.port == 8080
    assert loaded.debug is True
    assert isinstance(loaded.password, Secret)
    assert loaded.password.reveal() == "s3cr3t-pw"
    assert loaded.data_dir == Path("/var/lib/relay")
    assert loaded.topics == ("payments.events", "ledger.events")
    assert loaded.timeout_ms == 500
    assert loaded.group is None
    assert loaded.batch_size_max is None
    assert loaded.api_token.reveal() == "default-token"
    assert loaded.derived == 0


def test_optional_and_defaulted_fields_read_the_environment_when_set() -> None:
    """A set variable overrides a default; ``int | None`` converts to int."""
    loaded = load_settings(
        _Settings,
        {**ENV, "T_TIMEOUT_MS": " 750 ", "T_GROUP": "g1", "T_BATCH_SIZE_MAX": "64", "T_API_TOKEN": "tok"},
    )
    assert loaded.timeout_ms == 750
    assert loaded.group == "g1"
    assert loaded.batch_size_max == 64
    assert loaded.api_token.reveal() == "tok"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        *[("1", True), ("true", True), ("TRUE", True), (" yes ", True), ("On", True)],
        *[("0", False), ("false", False), ("No", False), ("off", False)],
    ],
)
def test_bool_spellings(raw: str, expected: bool) -> None:
    """The documented true/false spellings, in any case and with surrounding spaces."""
    assert load_settings(_Settings, {**ENV, "T_DEBUG": raw}).debug is expected


def test_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without an explicit mapping, load_settings reads os.environ."""
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("T_PORT", "9090")
    assert load_settings(_Settings).port == 9090


# --- errors --------------------------------------------------------------------------------------


def test_missing_variables_are_all_named_in_one_error() -> None:
    """With nothing set, one SettingsError lists every required variable (and no defaulted one)."""
    error = _problems({})
    assert len(error.problems) == len(REQUIRED)
    for name in REQUIRED:
        assert f"{name} is required but not set" in str(error)
    for name in ("T_TIMEOUT_MS", "T_GROUP", "T_API_TOKEN"):
        assert name not in str(error)


def test_empty_value_counts_as_missing() -> None:
    """An empty variable (``T_NAME=``) is as missing as an absent one; a defaulted one keeps its default."""
    error = _problems({**ENV, "T_NAME": "", "T_PORT": ""})
    assert error.problems == ["T_NAME is required but not set", "T_PORT is required but not set"]
    assert load_settings(_Settings, {**ENV, "T_TIMEOUT_MS": ""}).timeout_ms == 500


def test_malformed_values_are_named_with_their_value_together_with_missing_ones() -> None:
    """A bad int and a bad bool are reported with the variable and the value, in the same error as
    a missing variable, so one restart fixes everything."""
    env = {**ENV, "T_PORT": "eighty", "T_DEBUG": "maybe"}
    del env["T_DATA_DIR"]
    error = _problems(env)
    assert len(error.problems) == 3
    message = str(error)
    assert message.startswith("invalid configuration: ")
    assert "T_PORT='eighty' is invalid" in message
    assert "T_DEBUG='maybe' is invalid: expected a boolean" in message
    assert "T_DATA_DIR is required but not set" in message


def test_malformed_optional_int_is_reported() -> None:
    """``int | None`` still validates a value that is set."""
    error = _problems({**ENV, "T_BATCH_SIZE_MAX": "lots"})
    assert error.problems[0].startswith("T_BATCH_SIZE_MAX='lots' is invalid")


def test_unsupported_type_is_a_settings_error() -> None:
    """A field type with no conversion (float: no floats near money) is refused, naming the variable."""
    error = _problems({"T_RATIO": "0.5"}, _FloatSetting)
    assert "T_RATIO='0.5' is invalid: unsupported settings type" in str(error)


def test_malformed_secret_value_is_shown_as_placeholder() -> None:
    """The problem line for a malformed secret shows ``<secret>`` where other variables show the value."""
    error = _problems({"T_PIN": "hunter2"}, _SecretNumber)
    assert error.problems[0].startswith("T_PIN=<secret> is invalid")


def test_malformed_secret_value_never_appears_anywhere_in_the_error() -> None:
    """The secret's text appears nowhere in the SettingsError (it is printed at exit and logged)."""
    error = _problems({"T_PIN": "hunter2"}, _SecretNumber)
    assert "hunter2" not in str(error)


# --- secrets -------------------------------------------------------------------------------------


def test_secret_never_reveals_itself_in_repr_or_str() -> None:
    """repr, str, f-strings, %-formatting and container reprs show only ``***``."""
    secret = Secret("s3cr3t-pw")
    renderings = [repr(secret), str(secret), f"{secret}", "%s" % secret, repr([secret]), repr({"k": secret})]  # noqa: UP031 - under test
    for rendering in renderings:
        assert "s3cr3t" not in rendering
        assert "***" in rendering
    assert secret.reveal() == "s3cr3t-pw"


def test_loaded_settings_repr_hides_secrets() -> None:
    """Logging the whole settings object (a common start-up line) shows no secret."""
    rendering = repr(load_settings(_Settings, {**ENV, "T_API_TOKEN": "tok-123"}))
    assert "s3cr3t-pw" not in rendering
    assert "tok-123" not in rendering
    assert "default-token" not in rendering
    assert "relay" in rendering


# --- describe and exit ---------------------------------------------------------------------------


def test_describe_lists_every_setting_with_default_and_doc() -> None:
    """One row per setting() field, in declaration order: required ones say so, secret defaults are
    hidden, other defaults are shown as repr, fields without setting() are omitted."""
    assert describe(_Settings) == [
        ("T_NAME", "(required)", "service name"),
        ("T_PORT", "(required)", "HTTP port"),
        ("T_DEBUG", "(required)", ""),
        ("T_PASSWORD", "(required)", "database password"),
        ("T_DATA_DIR", "(required)", ""),
        ("T_TOPICS", "(required)", "comma-separated topics"),
        ("T_TIMEOUT_MS", "500", ""),
        ("T_GROUP", "None", ""),
        ("T_BATCH_SIZE_MAX", "None", ""),
        ("T_API_TOKEN", "(secret)", ""),
    ]


def test_load_settings_or_exit_returns_settings_when_valid() -> None:
    """On a valid environment the entrypoint helper simply returns the settings."""
    assert load_settings_or_exit(_Settings, ENV).port == 8080


def test_load_settings_or_exit_exits_2_naming_the_variable(capsys: pytest.CaptureFixture[str]) -> None:
    """On a bad environment it prints every problem to stderr (not stdout) and exits with status 2,
    without revealing a secret that was set."""
    env = {**ENV, "T_PORT": "x"}
    del env["T_TOPICS"]
    with pytest.raises(SystemExit) as exc_info:
        load_settings_or_exit(_Settings, env)
    assert exc_info.value.code == 2
    captured = capsys.readouterr()
    assert "T_TOPICS is required but not set" in captured.err
    assert "T_PORT='x' is invalid" in captured.err
    assert "s3cr3t-pw" not in captured.err
    assert captured.out == ""


def test_a_field_check_refuses_a_bad_value_naming_the_variable() -> None:
    """``setting(check=...)``: a value of the right type that the check refuses is a start-up
    problem naming the variable and the reason, like a value of the wrong type."""
    import dataclasses  # noqa: PLC0415 - only this test

    from backbone.settings import SettingsError, load_settings, setting  # noqa: PLC0415 - only this test

    def positive_even(value: int) -> None:
        if value <= 0 or value % 2:
            raise ValueError("must be a positive even number")

    @dataclasses.dataclass(frozen=True)
    class Checked:
        lanes: int = setting("LANES", 2, check=positive_even)

    assert load_settings(Checked, {"LANES": "4"}).lanes == 4
    with pytest.raises(SettingsError) as refused:
        load_settings(Checked, {"LANES": "3"})
    assert "LANES='3' is invalid: must be a positive even number" in str(refused.value)


# --- values from files (NAME_FILE: Docker secrets, Kubernetes secret volumes) ---------------------


def test_a_setting_is_read_from_the_file_its_name_file_variable_names(tmp_path: Path) -> None:
    """``T_PASSWORD_FILE`` gives the secret from a mounted file, less its trailing newline; any setting
    (not only secrets) may come from a file the same way."""
    (tmp_path / "pw").write_text("from-a-file\n")
    (tmp_path / "port").write_text("9090")
    env = {k: v for k, v in ENV.items() if k not in ("T_PASSWORD", "T_PORT")}
    env |= {"T_PASSWORD_FILE": str(tmp_path / "pw"), "T_PORT_FILE": str(tmp_path / "port")}
    loaded = load_settings(_Settings, env)
    assert loaded.password.reveal() == "from-a-file"
    assert loaded.port == 9090


def test_a_value_and_its_file_both_set_is_refused() -> None:
    """Two sources for one setting are ambiguous: refused, naming both variables."""
    problems = _problems({**ENV, "T_PASSWORD_FILE": "/run/secrets/pw"})
    assert problems.problems == ["T_PASSWORD and T_PASSWORD_FILE are both set: set one"]


def test_an_unreadable_file_is_refused_without_quoting_anything_from_it(tmp_path: Path) -> None:
    """A missing or undecodable secret file is a start-up error naming the variable; the bytes of a file
    that exists but is not text never appear in the error."""
    (tmp_path / "binary").write_bytes(b"\xff\xfe-s3cr3t")
    env = {k: v for k, v in ENV.items() if k != "T_PASSWORD"}
    missing = _problems({**env, "T_PASSWORD_FILE": str(tmp_path / "absent")})
    assert missing.problems == [
        f"T_PASSWORD_FILE={str(tmp_path / 'absent')!r} cannot be read: FileNotFoundError"
    ]
    garbled = _problems({**env, "T_PASSWORD_FILE": str(tmp_path / "binary")})
    assert "s3cr3t" not in str(garbled)
    assert "UnicodeDecodeError" in str(garbled)


def test_shared_checks_refuse_a_bad_zone_and_a_non_positive_count() -> None:
    """backbone.settings' shared checks: an unknown IANA zone and a count of zero or less are
    refused at start, naming the variable; good values load."""
    from dataclasses import dataclass  # noqa: PLC0415 - only this test

    from backbone.settings import SettingsError, iana_zone, load_settings, positive, setting  # noqa: PLC0415 - only this test

    @dataclass(frozen=True)
    class Checked:
        zone: str = setting("X_ZONE", "UTC", check=iana_zone)
        count: int = setting("X_COUNT", 1, check=positive)

    assert load_settings(Checked, {"X_ZONE": "Asia/Kuala_Lumpur", "X_COUNT": "3"}) == Checked(
        "Asia/Kuala_Lumpur", 3
    )
    with pytest.raises(SettingsError) as refused:
        load_settings(Checked, {"X_ZONE": "Mars/Olympus", "X_COUNT": "0"})
    text = str(refused.value)
    assert "X_ZONE" in text and "not an IANA time zone" in text
    assert "X_COUNT" in text and "must be positive" in text


def test_http_url_refuses_anything_but_an_http_or_https_base_naming_the_variable() -> None:
    """The check of a command's API URL: http(s) with or without a trailing slash loads; another
    scheme, or a bare host, is refused naming the variable and its value."""

    @dataclass(frozen=True)
    class Client:
        api_url: str = setting("X_API_URL", "http://127.0.0.1:1", check=http_url)

    assert load_settings(Client, {"X_API_URL": "https://api.example/"}).api_url == "https://api.example/"
    for bad in ("ftp://api.example", "api.example:8085"):
        assert _problems_of(Client, {"X_API_URL": bad}) == [
            f"X_API_URL={bad!r} is invalid: not an http(s) URL"
        ]


def _problems_of(cls: type[object], env: dict[str, str]) -> list[str]:
    with pytest.raises(SettingsError) as refused:
        load_settings(cls, env)
    return refused.value.problems


# --- the environment as a whole, and the terminal commands' tokens --------------------------------


def test_environment_gives_defaults_only_for_variables_left_unset() -> None:
    """A service's defaults for a backbone settings class fill the gaps of a copy of the environment;
    a value the environment sets (even an empty one) wins, and the given mapping is not changed."""
    env = {"SERVICE_NAME": "", "OTHER": "x"}
    assert environment(env, SERVICE_NAME="ledger", CONSUMER_NAME="ledger") == {
        "SERVICE_NAME": "",
        "OTHER": "x",
        "CONSUMER_NAME": "ledger",
    }
    assert env == {"SERVICE_NAME": "", "OTHER": "x"}


def test_terminal_token_prefers_the_variable_and_reads_a_file_stripped(tmp_path: Path) -> None:
    """An operator's token: the variable when set (even with a file named too), else the file's
    content without surrounding whitespace, else None."""
    (tmp_path / "token").write_text("  tok-from-file \n")
    file_only = {"T_TOKEN_FILE": str(tmp_path / "token")}
    assert terminal_token("T_TOKEN", file_only) == "tok-from-file"
    assert terminal_token("T_TOKEN", {**file_only, "T_TOKEN": "tok"}) == "tok"
    assert terminal_token("T_TOKEN", {}) is None
    assert terminal_token("T_TOKEN", {"T_TOKEN": ""}) is None


def test_terminal_token_names_an_unreadable_file() -> None:
    """A token file that cannot be read is a SettingsError naming the variable, the path and why."""
    with pytest.raises(SettingsError) as refused:
        terminal_token("T_TOKEN", {"T_TOKEN_FILE": "/nonexistent/token"})
    assert refused.value.problems == [
        "T_TOKEN_FILE: cannot read /nonexistent/token: No such file or directory"
    ]
