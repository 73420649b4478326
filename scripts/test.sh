#!/usr/bin/env bash
# The test command: installs what is missing (scripts/setup.sh, and chromium for the browser tests),
# lints, and runs every test.
# Privileged tests (real namespaces, OVS, tc, iperf3) need root; as root, nothing is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The browser tests (tests/browser) render the analysis report in Debian's chromium. It is installed here,
# for the tests, rather than by scripts/setup.sh, which installs only what the testbed needs.
if ! command -v chromium >/dev/null; then
  echo "test: installing chromium (for tests/browser)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends chromium
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
exec .venv/bin/pytest "$@"
