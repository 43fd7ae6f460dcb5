# Two stages: the wheel is built from the tree (its build fetches htmx from the npm registry and
# checks it against package-lock.json, so no Node.js), then installed with the locked dependencies
# into a slim runtime without build tools. Layers that change least come first.
FROM python:3.11-slim-bookworm AS wheel
WORKDIR /src
COPY pyproject.toml README.md package.json package-lock.json ./
COPY .ci/vendor_frontend.py .ci/
COPY app app
COPY templates templates
COPY migrations migrations
COPY static static
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

FROM python:3.11-slim-bookworm
# openssh-client: ssh-keyscan, and the `ssh` a ProxyCommand in ~/.ssh/config may run; procps: `launchdeck demo`,
# whose simulated hosts need ps as a real host does.
RUN apt-get update \
    && apt-get install -y --no-install-recommends openssh-client procps \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 1000 launchdeck \
    && mkdir -m 1777 /data
# The dependencies alone, at the locked versions: rebuilt only when pyproject or the lock changes.
COPY pyproject.toml requirements.lock /tmp/deps/
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('/tmp/deps/pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/deps/runtime.txt \
    && pip install --no-cache-dir --constraint /tmp/deps/requirements.lock --requirement /tmp/deps/runtime.txt \
    && rm -rf /tmp/deps
COPY --from=wheel /dist /tmp/dist
RUN pip install --no-cache-dir --no-deps /tmp/dist/*.whl && rm -rf /tmp/dist

USER launchdeck
ENV HOME=/home/launchdeck \
    LAUNCHDECK_DATA_DIR=/data \
    LAUNCHDECK_BIND=0.0.0.0 \
    LAUNCHDECK_PORT=8000
VOLUME ["/data"]
EXPOSE 8000
# Ready, not only alive: the database answers and the SSH connections are kept; on the port set.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s \
    CMD python -c "import os, urllib.request; urllib.request.urlopen(f'http://127.0.0.1:{os.environ[\"LAUNCHDECK_PORT\"]}/readyz', timeout=4)"
CMD ["launchdeck", "serve"]
