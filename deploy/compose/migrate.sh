#!/bin/sh
# docker-compose's one-shot migration (the `migrate` service): every service's migrations as its owner
# role, then the ledger's restricted runtime role. Idempotent: a second run applies nothing.
set -eu
s=/run/secrets
for svc in payment_state mt5_credit reconciler webhook_gateway ops_console; do
  DATABASE_URL_FILE="$s/$(echo "$svc" | tr _ -)-db-url" python -m "$svc" migrate
done
python -m ledger migrate --url "$(cat "$s/ledger-db-url")"
LEDGER_APP_PASSWORD="$(cat "$s/ledger-app-password")" \
  python -m ledger provision-role --admin-url "$(cat "$s/postgres-admin-url")" --database ledger --role ledger_app
# the console's operators are people: add them with
#   docker compose run --rm ops-console users add alice --permissions view,repair_propose --merchant broker-eu
# (the password on standard input); production puts single sign-on in front (docs/adr/0011).
