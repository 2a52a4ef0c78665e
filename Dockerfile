# syntax=docker/dockerfile:1
# atrex images (docs/deploy.md):
#   runner: the GPU side. CUDA + PyTorch + Triton base, atrex installed over the base's torch,
#           `atrex worker` as entry point; also the image candidate containers run in.
#   bot:    the web process (`atrex serve`) and light/GitHub-only workers: no torch, no CUDA.
#
#   docker build --target runner -t atrex-runner:0.1.0 .
#   docker build --target bot -t atrex-bot:0.1.0 .

# Base images, pinned by exact tag (override with --build-arg, e.g. a digest: name@sha256:...).
ARG RUNNER_BASE=pytorch/pytorch:2.11.0-cuda13.0-cudnn9-devel
ARG BOT_BASE=python:3.12.12-slim-bookworm

# --- build the atrex wheel once ----------------------------------------------------------------
FROM ${BOT_BASE} AS wheel
WORKDIR /src
COPY deploy/requirements-build.txt ./deploy/
RUN pip install --no-cache-dir -r deploy/requirements-build.txt
COPY pyproject.toml README.md ./
COPY atrex ./atrex
COPY runner ./runner
COPY agent ./agent
COPY bot ./bot
RUN pip wheel --no-deps --no-build-isolation --no-cache-dir --wheel-dir /dist .

# --- runner: GPU worker and candidate sandbox image --------------------------------------------
FROM ${RUNNER_BASE} AS runner
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# git: the bot's checkouts; gcc: Triton compiles its launcher stubs at run time.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends git gcc libc6-dev ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=wheel /dist /tmp/dist
COPY deploy/requirements-runner.txt deploy/requirements-bot.txt /tmp/
# Keep the base image's torch and triton: pin them to what is installed, then add atrex.
RUN python3 -m pip freeze | grep -iE '^(torch|triton|numpy)==' > /tmp/keep.txt \
    && python3 -m pip install --no-cache-dir -c /tmp/keep.txt -r /tmp/requirements-runner.txt \
    && python3 -m pip install --no-cache-dir --no-deps /tmp/dist/atrex-*.whl \
    && python3 -c "import torch, triton, runner, bot; print(torch.__version__, triton.__version__)" \
    && rm -rf /tmp/dist /tmp/keep.txt /tmp/requirements-*.txt
RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin atrex \
    && mkdir -p /var/lib/atrex && chown atrex:atrex /var/lib/atrex
ENV ATREX_DATA_DIR=/var/lib/atrex \
    ATREX_CACHE_DIR=/var/lib/atrex/cache \
    PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /var/lib/atrex
ENTRYPOINT ["atrex", "worker"]
CMD ["--gpu", "0"]

# --- bot: the web process, slim -----------------------------------------------------------------
FROM ${BOT_BASE} AS bot
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends git ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=wheel /dist /tmp/dist
COPY deploy/requirements-bot.txt /tmp/requirements-bot.txt
# The distribution depends on torch for the runner; the web process never imports it.
RUN pip install --no-cache-dir -r /tmp/requirements-bot.txt \
    && pip install --no-cache-dir --no-deps /tmp/dist/atrex-*.whl \
    && python -c "import atrex.bot.server, atrex.bot.celery_engine" && atrex --help > /dev/null \
    && rm -rf /tmp/dist /tmp/requirements-bot.txt
RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin atrex \
    && mkdir -p /var/lib/atrex && chown atrex:atrex /var/lib/atrex
ENV ATREX_DATA_DIR=/var/lib/atrex \
    PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /var/lib/atrex
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s \
    CMD ["python", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8080/healthz', timeout=4)"]
ENTRYPOINT ["atrex"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]
