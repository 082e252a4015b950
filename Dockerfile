# syntax=docker/dockerfile:1

# Both stages use the same base so that the venv's python symlink stays valid.
ARG PYTHON_IMAGE=python:3.11-slim

# --- builder: the project's wheel, installed with its dependencies in a venv
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# README.md is the package's long description: the build needs it
COPY pyproject.toml README.md ./
# the package carries its migrations (fairmatch/migrations)
COPY fairmatch ./fairmatch
RUN python -m venv /opt/fairmatch \
    && /opt/fairmatch/bin/pip wheel --no-deps --wheel-dir /wheels . \
    && /opt/fairmatch/bin/pip install /wheels/fairmatch-*.whl

# --- runtime: the venv only, no sources, no build tools
FROM ${PYTHON_IMAGE}
RUN useradd --system --uid 10001 --user-group --home-dir /srv/fairmatch --create-home fairmatch
COPY --from=builder /opt/fairmatch /opt/fairmatch
ENV PATH=/opt/fairmatch/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
# the working directory is where the SQLite default (./fairmatch.db) would
# live, so the service user owns it; production uses FAIRMATCH_DATABASE_URL
WORKDIR /srv/fairmatch
USER fairmatch
EXPOSE 8000
# liveness only (/readyz would also fail while the database is away, and a
# restart does not bring a database back); the port is the default CMD's
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2).status != 200)"]
ENTRYPOINT ["fairmatch"]
# mode `none` refuses 0.0.0.0: set FAIRMATCH_AUTH__MODE=token and
# FAIRMATCH_AUTH__SECRET (or FAIRMATCH_AUTH__ALLOW_REMOTE_WITHOUT_AUTH=true)
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
