# One image for every sumi service: `sumi serve <name>` picks the service.
FROM python:3.11-slim
# bubblewrap: the OS walls of the worker runtimes (docs/security.md); they need user
# namespaces, which Docker's default seccomp profile refuses: see the README.
RUN apt-get update && apt-get install -y --no-install-recommends nodejs bubblewrap \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md ./
COPY services services
COPY projections projections
COPY schemas schemas
RUN pip install --no-cache-dir .
ENV SUMI_HTTP_HOST=0.0.0.0
ENTRYPOINT ["sumi"]
