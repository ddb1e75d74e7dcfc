# One image for every sumi service: `sumi serve <name>` picks the service.
FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends nodejs \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md ./
COPY services services
COPY projections projections
COPY schemas schemas
RUN pip install --no-cache-dir .
ENV SUMI_HTTP_HOST=0.0.0.0
ENTRYPOINT ["sumi"]
