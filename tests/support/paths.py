"""Where things are: the checkout, and the folders of data the tests read. Every path a test
needs relative to the checkout is computed here, so that a test file can move."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout
TESTS = ROOT / "tests"
APP = ROOT / "app"
README = ROOT / "README.md"
PACKAGE_JSON = ROOT / "package.json"
NODE_MODULES = ROOT / "node_modules"

# The simulated hosts' Python library and programs, and the model files the demo serves.
HOSTLIB = APP / "demo" / "hostlib"
HOSTBIN = APP / "demo" / "hostbin"
MODEL_FILES = APP / "demo" / "model_files"

# Diagnosis data: the catalogue corpus, the held-back split, and the batches scored on arrival.
DIAGNOSE_CORPUS = TESTS / "diagnose_corpus"
DIAGNOSE_HOLDOUT = TESTS / "diagnose_holdout"
DIAGNOSE_ARRIVALS = TESTS / "diagnose_arrivals"
# Real SGLang releases against the simulator: the cases, the environment and the comparison.
ORACLE = TESTS / "oracle"
