# htmx comes from the npm registry at build time; the runtime image needs no Node.js.
FROM node:20-bookworm-slim AS frontend
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund --loglevel=error \
    && for pkg in htmx.org htmx-ext-sse; do \
         version=$(node -p "require('./node_modules/$pkg/package.json').version"); \
         mkdir -p vendor/$pkg@$version && cp node_modules/$pkg/dist/*.js vendor/$pkg@$version/; \
       done

FROM python:3.11-slim-bookworm
RUN apt-get update \
    && apt-get install -y --no-install-recommends openssh-client \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 1000 launchdeck \
    && mkdir -m 1777 /data
WORKDIR /opt/launchdeck
COPY . .
COPY --from=frontend /src/vendor ./static/vendor
# Editable: the app reads templates/, static/ and migrations/ from this tree.
RUN pip install --no-cache-dir -e .

USER launchdeck
ENV HOME=/home/launchdeck \
    LAUNCHDECK_DATA_DIR=/data \
    LAUNCHDECK_BIND=0.0.0.0 \
    LAUNCHDECK_PORT=8000
VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=3s CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/api/health')"
CMD ["launchdeck", "serve"]
