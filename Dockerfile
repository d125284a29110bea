# One image for every ratchet service (ingest, trainer, gate, fleet, controller); the command picks
# the role. CPU torch by default; build with TORCH_INDEX=https://download.pytorch.org/whl/cu128
# for GPU trainer nodes.
FROM python:3.11-slim
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
WORKDIR /app
# bubblewrap: the grader's sandbox (tasks/sandbox.py) runs every answer in a bwrap box and refuses
# to grade without it. tini: PID 1, so the box processes each grade leaves are reaped and signals
# reach ratchet (docs/OPERATIONS.md, "docker-compose").
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap tini \
    && rm -rf /var/lib/apt/lists/*
RUN pip install --no-cache-dir uv==0.13.9
COPY requirements.lock pyproject.toml README.md ./
RUN uv pip install --system --extra-index-url ${TORCH_INDEX} -r requirements.lock
COPY ratchet ratchet
COPY ingest ingest
COPY rewards rewards
COPY trainer trainer
COPY gating gating
COPY deploy deploy
COPY policy policy
COPY tasks tasks
COPY runtime runtime
RUN uv pip install --system --no-deps .
ENV TORCH_EXTENSIONS_DIR=/cache/torch_extensions RAY_USAGE_STATS_ENABLED=0
ENTRYPOINT ["/usr/bin/tini", "--", "ratchet"]
