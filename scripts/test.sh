#!/usr/bin/env bash
# The test command: installs what is missing (scripts/setup.sh), lints, and runs every test.
# Privileged tests (real namespaces, OVS, tc, iperf3) need root; as root, nothing is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
exec .venv/bin/pytest "$@"
