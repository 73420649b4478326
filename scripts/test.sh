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
.venv/bin/pytest "$@"
# The tests of kernel features (pytest -m kernel: netem, fq, the openvswitch module) check what the
# kernel has. Where this host's kernel lacks netem (this project's own machines), the whole suite's run
# (no arguments) runs them again in the stock-kernel guest, where they meet the features for real.
if [ $# -eq 0 ] && [ "$(id -u)" -eq 0 ]; then
  modprobe -q sch_netem 2>/dev/null || true
  if [ ! -d /sys/module/sch_netem ]; then
    echo "test: this kernel has no sch_netem; the kernel-feature tests again, in the stock-kernel guest"
    .venv/bin/testbed guest --timeout 1200 --memory 4096 -- \
      sh -c "cd '$PWD' && .venv/bin/python -m pytest -m kernel -p no:cacheprovider tests/privileged"
  fi
fi
