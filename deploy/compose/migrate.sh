#!/bin/sh
# docker-compose's one-shot migration (the `migrate` service): every service's migrations as its owner
# role, then the ledger's restricted runtime role. Idempotent: a second run applies nothing.
set -eu
s=/run/secrets
for svc in payment_state mt5_credit reconciler webhook_gateway; do
  DATABASE_URL_FILE="$s/$(echo "$svc" | tr _ -)-db-url" python -m "$svc" migrate
done
python -m ledger migrate --url "$(cat "$s/ledger-db-url")"
LEDGER_APP_PASSWORD="$(cat "$s/ledger-app-password")" \
  python -m ledger provision-role --admin-url "$(cat "$s/postgres-admin-url")" --database ledger --role ledger_app
