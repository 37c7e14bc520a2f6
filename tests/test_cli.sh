#!/usr/bin/env bash
# The rlcpp binary: --version, info on a fixture, and clear errors with a non-zero exit on bad input.
set -uo pipefail
rlcpp=${1:?usage: test_cli.sh RLCPP_BINARY}
fixtures=${RLCPP_FIXTURES:-$RLCPP_DEFAULT_FIXTURES}
fail=0
expect() {  # expect NAME EXPECTED_RC PATTERN -- COMMAND...
  local name=$1 rc_want=$2 pattern=$3; shift 4
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ "$rc" -ne "$rc_want" ] || ! grep -qE "$pattern" <<<"$out"; then
    echo "FAIL $name: rc=$rc (want $rc_want), output lacks /$pattern/:"; echo "$out" | head -20; fail=1
  else
    echo "ok   $name"
  fi
}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
expect version 0 '^rlcpp [0-9]+\.[0-9]+\.[0-9]+' -- "$rlcpp" --version
expect info 0 'head_dim 24' -- "$rlcpp" info "$fixtures/qwen3-tiny"
expect info-params 0 'parameters +[0-9]+ on disk' -- "$rlcpp" info "$fixtures/llama-tiny"
expect info-untied 0 'tied embeddings +no' -- "$rlcpp" info "$fixtures/llama-tiny"
expect parity 0 'max \|logits - reference\| += [0-9.e-]+' -- "$rlcpp" parity "$fixtures/qwen2-tiny"
expect info-missing 2 "error: .*$tmp/none.*config.json" -- "$rlcpp" info "$tmp/none"
mkdir -p "$tmp/bad"; cp "$fixtures/qwen2-tiny/config.json" "$tmp/bad/"; printf 'garbage!' > "$tmp/bad/model.safetensors"
expect info-corrupt 2 'error: .*model.safetensors.*header length' -- "$rlcpp" info "$tmp/bad"
expect bad-dtype 2 'error: --dtype: unknown dtype "fp8"' -- "$rlcpp" parity "$fixtures/qwen2-tiny" --dtype fp8
expect bad-flag 109 "nope" -- "$rlcpp" info x --nope
exit $fail
