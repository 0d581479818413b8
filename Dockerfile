# One image for every process of the product (docker-compose.yml, deploy/k8s): Python 3.11, the
# backbone, every service, the schemas. Each process is `python -m <service> <command>`
# (deploy/processes.toml). Services are installed in editable mode on purpose: each finds its
# migrations/ next to its package (services/<name>/migrations), as in the repository.
FROM python:3.11-slim
WORKDIR /app
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 SCHEMAS_DIR=/app/schemas
COPY libs /app/libs
RUN pip install --no-cache-dir /app/libs
COPY schemas /app/schemas
COPY services /app/services
RUN pip install --no-cache-dir \
      -e /app/services/mt5_sim -e /app/services/psp_sim -e /app/services/webhook_gateway \
      -e /app/services/payment_state -e /app/services/mt5_credit -e /app/services/ledger \
      -e /app/services/reconciler -e /app/services/ops_console
COPY deploy/compose/migrate.sh /app/deploy/compose/migrate.sh
USER nobody
