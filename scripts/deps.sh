#!/usr/bin/env bash
# Installs everything rlcpp needs to build, test and run: the Debian packages below, then the pinned
# Python packages (LibTorch among them, as the torch wheel) in a virtual environment of rlcpp's own
# (scripts/python_env.sh). Idempotent: packages already present are not downloaded again, and
# apt-get update runs only when something is missing.
set -euo pipefail

PACKAGES=(
  build-essential cmake ccache pkg-config git
  libhwy-dev                                           # Google Highway: the CPU kernels' SIMD, dispatched at run time
  nlohmann-json3-dev libyaml-cpp-dev libcli11-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev
  libpcre2-dev libutf8proc-dev                         # tokenizer regex and NFC
  libopenmpi-dev openmpi-bin                           # process launch and CPU collectives
  libcpp-httplib-dev                                   # rlcpp serve and the remote rollout backend (HTTP)
  clang libclang-rt-14-dev                             # libFuzzer targets
  python3 python3-venv                                 # the example external reward; the virtual environment of scripts/python_env.sh
  python3-numpy                                        # the fixture script (tests/fixtures), on Debian's python3 alone
  chromium                                             # the report test renders the HTML in a real browser
  bubblewrap                                           # the sandbox of code rewards: namespaces for untrusted programs
  iproute2 util-linux                                  # the two-host test: network namespaces and a veth pair
  time                                                 # peak RSS of runs (the memory-estimate test, bench/)
  curl                                                 # the serve tests' raw HTTP requests
  hey                                                  # HTTP load against rlcpp serve (bench/serve_load.sh)
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#PACKAGES[@]} Debian packages present"
else
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

bash "$(dirname "$0")/python_env.sh"
