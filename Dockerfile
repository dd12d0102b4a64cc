# Build: the same install step as CI (scripts/install), into a virtual environment.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY scripts ./scripts
COPY calibration ./calibration
COPY app ./app
COPY calibration_client ./calibration_client
COPY migrations ./migrations
RUN scripts/install /opt/venv plot,postgres,client

# Run: only the virtual environment (runtime dependencies), as a non-root user.
FROM python:3.11-slim
RUN useradd --create-home --uid 10001 calibration
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    CALIBRATION_HOST=0.0.0.0 \
    CALIBRATION_PORT=8000 \
    CALIBRATION_MIGRATE_ON_START=false
USER calibration
WORKDIR /home/calibration
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)"]
# uvicorn, started by `serve` (workers from CALIBRATION_WORKERS); `migrate` is the one-off command
CMD ["calibration-service", "serve"]
