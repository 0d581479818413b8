# Base image for every service and tool: Python 3.11, the pinned backbone, the schemas.
# Services extend it with their own package (services/<name>) and entrypoint.
FROM python:3.11-slim
WORKDIR /app
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 SCHEMAS_DIR=/app/schemas
COPY libs /app/libs
RUN pip install --no-cache-dir /app/libs
COPY schemas /app/schemas
USER nobody
