#!/usr/bin/env bash
# Installs the llama.cpp anchor of bench/llamacpp.sh: the prebuilt CPU libraries of llama.cpp that
# npm's node-llama-cpp@3.21.1 ships (its platform package @node-llama-cpp/<platform>@3.21.1), and
# koffi@2.16.3, through which llama_ffi.mjs calls them. Nothing is compiled and no install script
# runs (--ignore-scripts): node-llama-cpp itself is installed only for the llama.cpp sources it
# bundles (llama/gitRelease.bundle), whose include/llama.h the struct layouts in llama_ffi.mjs were
# read from. Its CUDA and Vulkan builds (optional dependencies, ~700 MB) are left out.
#
#   bash bench/anchors/llamacpp/install.sh        # prints the folder; about 110 MB, once
#
# Env: LLAMA_ANCHOR_DIR (default ~/.cache/rlcpp/llamacpp-anchor). Idempotent: a folder that already
# holds the pinned versions is left as it is. Exit 2 when npm is missing or the install fails.
set -euo pipefail
dir=${LLAMA_ANCHOR_DIR:-$HOME/.cache/rlcpp/llamacpp-anchor}
version=3.21.1 koffi_version=2.16.3

case "$(uname -s)-$(uname -m)" in
  Linux-x86_64)  platform=linux-x64 ;;
  Linux-aarch64) platform=linux-arm64 ;;
  *) echo "bench/anchors/llamacpp/install.sh: the anchor runs on Linux x86_64 and aarch64, not $(uname -sm)" >&2; exit 2 ;;
esac
binaries=@node-llama-cpp/$platform

installed() {  # the version field of node_modules/PACKAGE/package.json, or nothing
  node -e 'try { console.log(require(process.argv[1] + "/node_modules/" + process.argv[2] + "/package.json").version) } catch {}' \
    "$dir" "$1" 2>/dev/null
}
if [ "$(installed "$binaries")" = "$version" ] && [ "$(installed node-llama-cpp)" = "$version" ] &&
   [ "$(installed koffi)" = "$koffi_version" ]; then
  echo "$dir"
  exit 0
fi

for tool in node npm; do
  command -v "$tool" > /dev/null || { echo "bench/anchors/llamacpp/install.sh: $tool is missing: make deps (or apt-get install nodejs npm)" >&2; exit 2; }
done
mkdir -p "$dir"
[ -f "$dir/package.json" ] || echo '{"name": "rlcpp-llamacpp-anchor", "private": true}' > "$dir/package.json"
echo "installing llama.cpp (node-llama-cpp@$version, $binaries) and koffi@$koffi_version into $dir" >&2
# A lock, so that two bench runs starting together do not install over each other.
if ! (flock 9 && cd "$dir" && timeout 600 npm install --save-exact --omit=optional --ignore-scripts --no-audit --no-fund \
        --loglevel=error "node-llama-cpp@$version" "$binaries@$version" "koffi@$koffi_version" >&2) 9> "$dir/.install.lock"; then
  echo "bench/anchors/llamacpp/install.sh: npm install failed in $dir (is the npm registry reachable? npm config get registry)" >&2
  exit 2
fi
lib_dir=$dir/node_modules/$binaries/bins/$platform
ls "$lib_dir"/libllama*.so > /dev/null 2>&1 || {
  echo "bench/anchors/llamacpp/install.sh: $lib_dir holds no libllama after the install" >&2; exit 2; }
echo "$dir"
