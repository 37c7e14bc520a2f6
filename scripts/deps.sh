#!/usr/bin/env bash
# Installs every Debian package rlcpp needs to build, test and run. Idempotent: packages already
# present are not downloaded again, and apt-get update runs only when something is missing.
set -euo pipefail

PACKAGES=(
  build-essential cmake ccache pkg-config git
  libtorch-dev libopenblas0-pthread libgloo-dev        # tensors; fast BLAS (≈30× over reference BLAS); c10d headers
  libhwy-dev                                           # Google Highway: the CPU kernels' SIMD, dispatched at run time
  nlohmann-json3-dev libyaml-cpp-dev libcli11-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev
  libpcre2-dev libutf8proc-dev                         # tokenizer regex and NFC
  libopenmpi-dev openmpi-bin                           # process launch and CPU collectives
  libcpp-httplib-dev                                   # rlcpp serve and the remote rollout backend (HTTP)
  clang libclang-rt-14-dev                             # libFuzzer targets
  python3                                              # the example external reward (standard library only)
  python3-numpy python3-torch                          # the fixture script (tests/fixtures) and the PyTorch-eager anchors (bench/anchors)
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
# Node.js and npm run the third-party tokenizer/template oracles of the parity tests; any
# recent node will do, so Debian's is installed only when none is on the PATH.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
