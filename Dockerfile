FROM python:3.11-slim-bookworm

RUN apt-get update \
    && apt-get install -y --no-install-recommends openssh-client nodejs npm make \
    && rm -rf /var/lib/apt/lists/*

RUN useradd --create-home --uid 1000 launchdeck
WORKDIR /opt/launchdeck
COPY pyproject.toml package.json package-lock.json README.md Makefile ./
COPY app ./app
COPY migrations ./migrations
COPY templates ./templates
COPY static ./static
RUN pip install --no-cache-dir . \
    && rm -rf static/vendor && make static/vendor/.installed && rm -rf node_modules

USER launchdeck
ENV LAUNCHDECK_DATA_DIR=/data \
    LAUNCHDECK_BIND=0.0.0.0 \
    LAUNCHDECK_PORT=8000
VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=3s CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/api/health')"
CMD ["launchdeck", "serve"]
