#!/usr/bin/env bash
# Installs everything the testbed needs on a fresh Debian machine, as root: system packages
# (Open vSwitch, iperf3 and libiperf, ethtool, iproute2, Python venv, the gRPC toolchains of C++ and
# Go, Debian's OpenCV for the C++ and Java servers' image ops, the stock kernel, QEMU and busybox of
# `testbed guest`) and the project's virtualenv in .venv,
# then builds the C++, Go and Java gRPC servers and generates the Ruby one's messages. Safe to run
# again: it only installs and builds what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
  echo "scripts/setup.sh must run as root (it installs packages; the testbed creates namespaces)" >&2
  exit 1
fi

APT_PACKAGES=(openvswitch-switch openvswitch-common iperf3 libiperf0 ethtool iproute2 iputils-ping kmod curl
              lighttpd openssh-server openssh-client
              python3 python3-venv python3-dev ca-certificates git
              # the gRPC servers in C++ and Go (server/languages.py), built below
              make g++ pkg-config protobuf-compiler protobuf-compiler-grpc libprotobuf-dev libgrpc++-dev
              libeigen3-dev golang-go golang-google-grpc-dev golang-google-protobuf-dev golang-golang-x-sys-dev
              # the gRPC servers in Java (gRPC-Java on Netty, JNA for flock, Commons Math; javax.annotation
              # for the gRPC plugin's output) and Ruby (ruby-grpc, its protobuf, the interpreter's `matrix`)
              default-jdk-headless libgrpc-java libprotobuf-java protobuf-compiler-grpc-java-plugin
              libnetty-java libperfmark-java libgoogle-gson-java libguava-java libjna-java
              libcommons-math3-java libgeronimo-annotation-1.3-spec-java
              ruby ruby-grpc ruby-google-protobuf
              # the image ops' OpenCV (contracts/images.py): the C++ server's and the Java server's (4.6);
              # Python's comes from PyPI (opencv-python-headless, pyproject.toml); Go and Ruby filter gray
              # with their own code
              libopencv-dev libopencv-java
              # `testbed guest`: a stock Debian kernel under QEMU, for netem, fq and the OVS module
              # where this machine's own kernel lacks them (testbed/guest.py)
              linux-image-amd64 qemu-system-x86 busybox-static)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Never let the package scripts start Open vSwitch, iperf3 or lighttpd in the root namespace: the
  # testbed runs its own daemons inside its namespaces (lighttpd: the cgi server stack, started by
  # `testbed up` with a configuration of its own).
  policy=/usr/sbin/policy-rc.d
  created_policy=0
  if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod +x "$policy"; created_policy=1; fi
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
  [ "$created_policy" = 1 ] && rm -f "$policy"
  # nor at boot: the package enables its service, which would hold port 80 of the root namespace
  if [[ " ${missing[*]} " == *" lighttpd "* ]] && command -v systemctl >/dev/null; then
    systemctl disable lighttpd >/dev/null 2>&1 || true
  fi
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.installed-$(sha1sum pyproject.toml | cut -c1-12)
if [ ! -e "$stamp" ]; then
  echo "setup: installing the project and its Python dependencies into .venv"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[dev]'
  rm -f .venv/.installed-*
  touch "$stamp"
fi
# the C++, Go, Java and Ruby gRPC servers and the C++ tagless server (make rebuilds only what changed,
# one job at a time)
for dir in server/cpp server/cpp_tagless server/go server/java server/ruby; do
  make -s -C "$dir" >/dev/null || { echo "setup: building $dir failed" >&2; exit 1; }
done
echo "setup: ready (.venv/bin/testbed)"
