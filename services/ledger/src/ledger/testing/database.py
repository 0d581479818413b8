"""Throwaway ledger databases for tests and the benchmark: migrated, with the runtime role.

Roles are cluster-wide and tests run in parallel against one shared cluster: every test database
uses the same test role (``ledger_app_test``), created once by whoever comes first (a lost race is
harmless, see ``adapters/roles.py``), and gets its own grants (grants are per database).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from backbone.testing import databases
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ledger.adapters.roles import provision_runtime_role

MIGRATIONS: Final = Path(__file__).resolve().parents[3] / "migrations"
TEST_APP_ROLE: Final = "ledger_app_test"
TEST_APP_PASSWORD: Final = "ledger_app_test"  # noqa: S105 - a throwaway role on a dev cluster


@dataclass(frozen=True)
class LedgerDatabase:
    admin_url: str  # superuser, connected to this database (tampering, setup)
    app_url: str  # the restricted runtime role (what the service runs as)

    def drop(self, server_admin_url: str) -> None:
        databases.drop_database(server_admin_url, self.admin_url)


def with_user(url: str, user: str, password: str) -> str:
    params = conninfo_to_dict(url)
    params["user"], params["password"] = user, password
    return make_conninfo(**params)  # type: ignore[arg-type]


def create_ledger_database(server_admin_url: str, prefix: str = "ledger") -> LedgerDatabase:
    admin_url = databases.create_database(server_admin_url, [MIGRATIONS], prefix=prefix)
    provision_runtime_role(admin_url, TEST_APP_ROLE, TEST_APP_PASSWORD)
    return LedgerDatabase(admin_url, with_user(admin_url, TEST_APP_ROLE, TEST_APP_PASSWORD))
