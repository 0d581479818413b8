"""backbone.tokens: a tokens file of hashes, callers with permissions, and a front end's token acting
for the operator it authenticated (never as itself, never with more than it holds)."""

from __future__ import annotations

from pathlib import Path

import pytest
from backbone.tokens import Caller, TokenFileError, Tokens, token_hash

PERMS = frozenset({"cases:view", "cases:work", "repairs:propose", "repairs:approve"})
VIEWER, CONSOLE = "viewer-token-0123456789", "console-token-0123456789"


@pytest.fixture
def tokens(tmp_path: Path) -> Tokens:
    path = tmp_path / "tokens"
    path.write_text(
        "# principal permissions hash\n"
        f"viewer cases:view sha256:{token_hash(VIEWER)}\n"
        f"console cases:view,repairs:propose,repairs:approve,operators:assert sha256:{token_hash(CONSOLE)}\n"
    )
    return Tokens.load(path, PERMS)


def bearer(token: str, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **extra}


def test_a_plain_token_is_its_principal(tokens: Tokens) -> None:
    """A service token authenticates as its own principal with exactly its permissions; a wrong
    token, another scheme or no header is no caller."""
    assert tokens.authenticate(bearer(VIEWER)) == Caller("viewer", frozenset({"cases:view"}))
    assert tokens.authenticate(bearer("wrong-token")) is None
    assert tokens.authenticate({"Authorization": f"Basic {VIEWER}"}) is None
    assert tokens.authenticate({}) is None


def test_a_plain_token_may_not_name_an_operator(tokens: Tokens) -> None:
    """X-Operator from a token without operators:assert is refused, so it cannot be smuggled in."""
    assert tokens.authenticate(bearer(VIEWER, **{"X-Operator": "alice"})) is None


def test_the_console_acts_only_for_an_operator(tokens: Tokens) -> None:
    """A front end's token is the operator it names, with the asserted permissions it also holds
    (an asserted permission it lacks is dropped, operators:assert is never passed on); without an
    operator, or with a malformed name, it is no caller at all."""
    caller = tokens.authenticate(
        bearer(
            CONSOLE,
            **{"X-Operator": "alice", "X-Operator-Permissions": "cases:view,cases:work,operators:assert"},
        )
    )
    assert caller == Caller("alice", frozenset({"cases:view"}), frozenset())
    assert tokens.authenticate(bearer(CONSOLE)) is None
    for bad in ("", "al ice", "x" * 65, "bob<script>"):
        assert tokens.authenticate(bearer(CONSOLE, **{"X-Operator": bad})) is None
    bare = tokens.authenticate(bearer(CONSOLE, **{"X-Operator": "bob"}))
    assert bare == Caller("bob", frozenset(), frozenset())


def test_an_operator_sees_the_merchants_the_front_end_names_and_no_others(tokens: Tokens) -> None:
    """The operator's merchants come from X-Operator-Merchants; none named is none seen (fail
    closed); a malformed merchant or too many refuse the caller; a service token's own caller is
    not merchant-scoped, and the header cannot scope (or widen) it either."""
    alice = tokens.authenticate(
        bearer(CONSOLE, **{"X-Operator": "alice", "X-Operator-Merchants": "broker-eu,broker-uk"})
    )
    assert alice is not None and alice.merchants == frozenset({"broker-eu", "broker-uk"})
    assert alice.sees("broker-eu") and not alice.sees("broker-asia")
    nobody = tokens.authenticate(bearer(CONSOLE, **{"X-Operator": "bob"}))
    assert nobody is not None and not nobody.sees("broker-eu")
    for bad in ("broker eu", "<b>", ",".join(f"m{i}" for i in range(101))):
        headers = {"X-Operator": "alice", "X-Operator-Merchants": bad}
        assert tokens.authenticate(bearer(CONSOLE, **headers)) is None
    service = tokens.authenticate(bearer(VIEWER, **{"X-Operator-Merchants": "broker-uk"}))
    assert service is not None and service.merchants is None and service.sees("broker-eu")


def test_an_operator_of_every_merchant_is_named_by_a_star_alone(tokens: Tokens) -> None:
    """``*`` alone in X-Operator-Merchants is every merchant (merchants None, records of no merchant
    included); ``*`` beside named merchants is ambiguous and refuses the caller; an operator of
    named merchants never sees a record of no merchant."""
    every = tokens.authenticate(bearer(CONSOLE, **{"X-Operator": "root", "X-Operator-Merchants": "*"}))
    assert every is not None and every.merchants is None
    assert every.sees("broker-eu") and every.sees(None)
    mixed = {"X-Operator": "root", "X-Operator-Merchants": "*,broker-eu"}
    assert tokens.authenticate(bearer(CONSOLE, **mixed)) is None
    one = {"X-Operator": "alice", "X-Operator-Merchants": "broker-eu"}
    named = tokens.authenticate(bearer(CONSOLE, **one))
    assert named is not None and named.sees("broker-eu") and not named.sees(None)


def test_a_file_with_an_unknown_permission_is_refused(tmp_path: Path) -> None:
    """A permission the service does not know refuses the whole file, naming the line."""
    path = tmp_path / "tokens"
    path.write_text(f"x cases:delete sha256:{token_hash('t' * 20)}\n")
    with pytest.raises(TokenFileError, match="tokens:1: unknown permission"):
        Tokens.load(path, PERMS)
