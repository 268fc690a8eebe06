# The code location image: Dagster's webserver and daemon load `pipeline.definitions` from it, Celery workers
# (`seedwheel worker`) and k8s step pods run its steps. It is the install `make quickstart` makes (the same
# Makefile target, CPU torch, the bundled model), plus the production extras: dagster-postgres, dagster-celery,
# redis. GPU training pods use an image built FROM a CUDA base with `pip install '.[gpu]'` instead.
FROM python:3.11-slim-bookworm

# make runs the install (the versions follow the base image's Debian release).
RUN apt-get update \
    && apt-get install -y --no-install-recommends make \
    && rm -rf /var/lib/apt/lists/*

# PyPI's default torch wheel is the CUDA build (GBs); this image runs CPU steps.
ENV PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu \
    PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1 \
    MPLCONFIGDIR=/tmp/matplotlib \
    VENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

WORKDIR /opt/seedwheel
COPY pyproject.toml Makefile README.md ./
COPY core core
COPY langmodels langmodels
COPY sandbox sandbox
COPY validators validators
COPY curation curation
COPY failures failures
COPY generators generators
COPY judge judge
COPY training training
COPY assets assets
COPY simulation simulation
COPY interop interop
COPY review review
COPY resources resources
COPY pipeline pipeline
COPY seeds seeds
COPY workspace.yaml ./
RUN make install-production

# The process stays root on purpose: the verifier sandbox (sandbox/process.py) runs each child of model-written
# code under its own unprivileged uid and in fresh network and mount namespaces, which takes root in the
# container (the pod needs CAP_SYS_ADMIN for the namespaces; without it the sandbox reports the missing layers).
ENV SEEDWHEEL_PROFILE=production \
    SEEDWHEEL_SEEDS=/opt/seedwheel/seeds
EXPOSE 3030
# The gRPC code server the Helm chart's user deployment expects; `seedwheel worker` for a Celery worker.
CMD ["dagster", "code-server", "start", "-h", "0.0.0.0", "-p", "3030", "-m", "pipeline.definitions"]
