#!/usr/bin/env bash
# docker-compose only: runs once inside the postgres:15 image (/docker-entrypoint-initdb.d) and
# creates the same databases and roles as deploy/postgres/pg.sh does locally, from the same list.
set -euo pipefail
while read -r line; do
  name="${line%%#*}"; name="$(echo "$name" | tr -d '[:space:]')"
  [[ -n "$name" ]] || continue
  password_var="PG_PASSWORD_${name^^}"
  password="${!password_var:-${name}_dev}"
  psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
       -v name="$name" -v password="$password" <<'SQL'
CREATE ROLE :"name" LOGIN PASSWORD :'password';
CREATE DATABASE :"name" OWNER :"name";
REVOKE ALL ON DATABASE :"name" FROM PUBLIC;
GRANT CONNECT, TEMPORARY ON DATABASE :"name" TO :"name";
SQL
done </databases.txt
