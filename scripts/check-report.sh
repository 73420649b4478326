#!/usr/bin/env bash
# Renders a run's analysis/report.html in headless Chromium and writes a PNG screenshot, to check by eye
# that the page and its embedded plots display from disk with no server and no network.
#
#   scripts/check-report.sh RUN_DIR [SCREENSHOT.png]
#
# The screenshot defaults to RUN_DIR/analysis/report-screenshot.png; WINDOW=1400,4000 (the default)
# sets its size in pixels (the top of the page that fits is captured). Installs Debian's `chromium`
# with apt-get if it is missing (needs root for that). Run `python -m analysis RUN_DIR` first.
# The suite checks the page in the same browser (tests/browser: at 1280x800 the first screen holds a
# figure and no long table, and every figure and link loads); this script is for looking at it.
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ] || [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
run_dir=$1
report="$run_dir/analysis/report.html"
if [ ! -f "$report" ]; then
  echo "check-report: $report does not exist (fix: run \`python -m analysis $run_dir\` first)" >&2
  exit 2
fi
shot=${2:-$run_dir/analysis/report-screenshot.png}
window=${WINDOW:-1400,4000}

browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "check-report: chromium is not installed (fix: run this as root, which installs it, or apt-get install chromium as root)" >&2
    exit 2
  fi
  echo "check-report: installing chromium"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends chromium
  browser=$(command -v chromium)
fi

report_url="file://$(realpath "$report")"
shot=$(realpath -m "$shot")
profile=$(mktemp -d)
log=$(mktemp)
trap 'rm -rf "$profile" "$log"' EXIT
rm -f "$shot"
# --no-sandbox: Chromium refuses to run as root otherwise; the page is our own local file.
if ! timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync --hide-scrollbars \
    --user-data-dir="$profile" --window-size="$window" --screenshot="$shot" "$report_url" >"$log" 2>&1 \
    || [ ! -s "$shot" ]; then
  echo "check-report: chromium did not write $shot; its output:" >&2
  tail -20 "$log" >&2
  exit 1
fi
echo "check-report: $shot ($(stat -c %s "$shot") bytes) from $report_url"
