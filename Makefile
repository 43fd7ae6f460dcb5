# One command surface for people and CI: make demo, make test, make bench, make lint.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test bench lint screenshots oracle-soak install system-packages lock wheel clean

demo: install
	$(BIN)/launchdeck demo

# Two workers, each with its own simulated cluster, dashboards and browser, and a file's tests kept
# together (module fixtures start once): most tests wait on processes and SSH more than they
# compute. `make test PYTEST_WORKERS=0` runs them in this process.
PYTEST_WORKERS ?= 2
test: install system-packages
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile

bench: install
	$(BIN)/python -m bench

lint: install
	$(BIN)/ruff check app tests bench migrations docs
	$(BIN)/ruff format --check app tests bench migrations docs
	$(BIN)/mypy app

# The simulator against real SGLang on argument lists drawn from fresh seeds (the seed is printed;
# SOAK_CASES per release, about a minute per thousand after the first build of the releases).
SOAK_CASES ?= 3000
oracle-soak: install
	$(BIN)/python -m tests.oracle.drawn --fresh --cases $(SOAK_CASES)

# The README's pictures, retaken from a demo it builds (about three minutes; needs chromium).
screenshots: install
	$(BIN)/python docs/screenshots.py

install: $(VENV)/.installed node_modules/.vendored

# Every Python package at the version requirements.lock pins (the image and CI install the same).
$(VENV)/.installed: pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --constraint requirements.lock -e '.[dev]'
	touch $@

# Refreshes the lock after pyproject's dependencies change: uv keeps every pin it can and resolves
# for Python 3.11 on every platform. `make lock LOCK_UPGRADE=--upgrade` takes the newest releases.
lock: $(VENV)/.installed
	$(BIN)/pip install --quiet uv
	$(BIN)/uv pip compile pyproject.toml --extra dev --universal --python-version 3.11 $(LOCK_UPGRADE) -o requirements.lock

# htmx and its SSE extension come from the npm registry, pinned in package.json and checked
# against package-lock.json, and are served from static/vendor/<package>@<version>/ (the image
# fetches them the same way). npm installs axe-core, which the browser tests inject.
node_modules/.vendored: package.json package-lock.json .ci/vendor_frontend.py
	npm ci --no-audit --no-fund --loglevel=error
	$(PYTHON) .ci/vendor_frontend.py
	touch $@

# The installable package, templates, static files (htmx included) and migrations inside: dist/.
wheel: install
	rm -rf dist
	$(BIN)/pip wheel --quiet --no-deps --wheel-dir dist .

# The tests talk to a real OpenSSH sshd, drive Debian's chromium, run jobs on Debian's Slurm, read GPU
# figures through Debian's Prometheus and reach several dashboard processes through its haproxy.
system-packages:
	@missing=""; \
	[ -x /usr/sbin/sshd ] || missing="$$missing openssh-server"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	[ -x /usr/sbin/slurmctld ] || missing="$$missing slurm-wlm"; \
	[ -x /usr/sbin/munged ] || missing="$$missing munge"; \
	command -v prometheus >/dev/null || missing="$$missing prometheus"; \
	[ -x /usr/sbin/haproxy ] || missing="$$missing haproxy"; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

clean:
	rm -rf $(VENV) node_modules static/vendor
