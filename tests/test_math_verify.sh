#!/usr/bin/env bash
# The boxed grader against Math-Verify (PyPI `math-verify`, in rlcpp's Python environment): every row
# of tests/data/math_equal_cases.txt, a generated corpus of answer forms and Math-Verify's own test
# cases (tests/data/math_verify_cases.jsonl), graded by `rlcpp grade` and by Math-Verify
# (tests/py/math_verify_check.py). Prints the agreement per set and the disagreements by class; fails
# on a new false positive: a pair rlcpp accepts and Math-Verify refuses that neither its label nor
# tests/data/math_verify_disagreements.txt says rlcpp is right about. $RLCPP_MATH_VERIFY_VERDICTS names
# a file of Math-Verify's verdicts (`math_verify_check.py verdicts FILE`) to reuse instead of running it.
# Usage: test_math_verify.sh RLCPP_BINARY SOURCE_DIR
set -uo pipefail
rlcpp=$(realpath "${1:?usage: test_math_verify.sh RLCPP_BINARY SOURCE_DIR}")
src=$(realpath "${2:?usage: test_math_verify.sh RLCPP_BINARY SOURCE_DIR}")
source "$(dirname "$0")/lib.sh"
check="$src/tests/py/math_verify_check.py"

$py "$check" write-input pairs.jsonl || { bad write-input; exit 1; }
"$rlcpp" grade --reward-type boxed --input pairs.jsonl -o rlcpp.jsonl 2> grade.err || { bad rlcpp-grades; cat grade.err; exit 1; }
n_pairs=$(wc -l < pairs.jsonl)
[ "$(wc -l < rlcpp.jsonl)" = "$n_pairs" ] && ok "rlcpp-grades-every-pair ($n_pairs)" || bad rlcpp-grades-every-pair
verdicts=()
[ -n "${RLCPP_MATH_VERIFY_VERDICTS:-}" ] && verdicts=(--verdicts "$RLCPP_MATH_VERIFY_VERDICTS")
$py "$check" compare pairs.jsonl rlcpp.jsonl "${verdicts[@]}" && ok no-new-false-positive || bad no-new-false-positive
exit $failed
