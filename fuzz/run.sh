#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for a while.
#   fuzz/run.sh [SECONDS] [TARGET...]      default: 60 s, every target
# Seeds come from fuzz/seeds/<target>/, a libFuzzer dictionary from fuzz/dicts/<target>.dict when there is one,
# and crashes land in fuzz/crashes/ (reproduce: the binary + the file).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}; shift || true
targets=("$@"); [ ${#targets[@]} -gt 0 ] || targets=(safetensors_header reward jinja tokenizer dataset_line yaml api_request)
out=${FUZZ_BUILD_DIR:-build-fuzz}; mkdir -p "$out" fuzz/crashes
declare -A sources=(
  [safetensors_header]="fuzz/safetensors_header_fuzz.cpp src/io/safetensors_header.cpp"
  [reward]="fuzz/reward_fuzz.cpp src/reward/reward.cpp src/reward/extract.cpp src/reward/math_equal.cpp src/reward/math_normalize.cpp src/reward/answer_forms.cpp src/reward/math_expr.cpp"
  [jinja]="fuzz/jinja_fuzz.cpp src/text/jinja/*.cpp"
  [tokenizer]="fuzz/tokenizer_fuzz.cpp src/text/tokenizer.cpp src/text/bpe.cpp src/text/pre_tokenizer.cpp src/text/normalizer.cpp src/text/regex.cpp src/text/unicode.cpp src/util/file.cpp"
  [dataset_line]="fuzz/dataset_line_fuzz.cpp src/io/prompt_dataset.cpp"
  [yaml]="fuzz/yaml_fuzz.cpp src/util/yaml.cpp src/util/file.cpp"
  [api_request]="fuzz/api_request_fuzz.cpp src/openai/protocol.cpp src/text/prompt_builder.cpp src/text/chat_template.cpp src/text/jinja/*.cpp src/io/prompt_dataset.cpp src/text/tokenizer.cpp src/text/bpe.cpp src/text/pre_tokenizer.cpp src/text/normalizer.cpp src/text/regex.cpp src/text/unicode.cpp src/util/file.cpp"
)
declare -A libs=([tokenizer]="-lpcre2-8 -lutf8proc -lspdlog" [yaml]="-lyaml-cpp" [dataset_line]="-lspdlog"
  [api_request]="-lpcre2-8 -lutf8proc -lspdlog")
# Compiler flags beyond the common ones. protocol.h includes engine/engine.h and so libtorch's headers
# (no torch symbol is linked), which clang 14 cannot compile against libstdc++ 12 in C++20 mode
# (constexpr std::vector of the incomplete c10::IValue): that target is built as C++17, which every
# file it needs compiles as.
declare -A cxxflags=([api_request]="-std=c++17 -Wno-c++20-extensions -isystem /usr/include/torch/csrc/api/include")
for target in "${targets[@]}"; do
  bin="$out/fuzz_$target"
  clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Isrc \
    ${cxxflags[$target]:-} ${sources[$target]} ${libs[$target]:-} -lfmt -o "$bin"
  corpus="$out/corpus-$target"; mkdir -p "$corpus"
  cp -n fuzz/seeds/"$target"/* "$corpus"/ 2>/dev/null || true
  dict=(); [ -f fuzz/dicts/"$target".dict ] && dict=(-dict=fuzz/dicts/"$target".dict)
  echo "fuzz: $target for ${seconds}s"
  set +e
  "$bin" "$corpus" -max_total_time="$seconds" -timeout=2 -rss_limit_mb=2048 -max_len=4096 "${dict[@]}" \
    -artifact_prefix=fuzz/crashes/"$target"- -print_final_stats=1 > "$out/fuzz_$target.log" 2>&1
  rc=$?
  set -e
  grep -E "^stat::(number_of_executed_units|average_exec_per_sec|slowest_unit_time_sec)|^Done|ERROR|SUMMARY" \
    "$out/fuzz_$target.log" || true
  if [ $rc -ne 0 ]; then
    echo "fuzz: $target FAILED (exit $rc); the input is in fuzz/crashes/, the log in $out/fuzz_$target.log"
    status=1
  fi
done
exit ${status:-0}
