#!/usr/bin/env bash
# The committed fixtures are exactly what tests/fixtures/make_fixtures.py writes: regenerated into a
# scratch folder, every file equals the committed one bit for bit, and the script's float64 reference
# recomputed from the committed weights agrees with the committed reference.
#   test_fixtures_reproducible.sh SOURCE_DIR
src=$(realpath "${1:?usage: test_fixtures_reproducible.sh SOURCE_DIR}")
source "$(dirname "$0")/lib.sh"
py=/usr/bin/python3
if ! "$py" -c 'import numpy' 2> /dev/null; then
  echo "SKIP: the fixture script needs Debian's python3-numpy (scripts/deps.sh installs it)"; exit 77
fi
committed=$src/tests/fixtures
"$py" "$committed/make_fixtures.py" --out regenerated > make.log 2>&1 || { bad make-fixtures; cat make.log; exit 1; }
n=0
for dir in regenerated/*/; do
  name=$(basename "$dir")
  for f in "$dir"*; do
    n=$((n + 1))
    cmp -s "$f" "$committed/$name/$(basename "$f")" && ok "same-$name/$(basename "$f")" || bad "same-$name/$(basename "$f")"
  done
done
# Every committed fixture folder is one the script makes (none left over from an older table).
for dir in "$committed"/*/; do
  [ -d "regenerated/$(basename "$dir")" ] && ok "made-$(basename "$dir")" || bad "made-$(basename "$dir") (not in FIXTURES)"
done
[ "$n" -ge 12 ] && ok "files-compared-$n" || bad "files-compared-$n"
"$py" "$committed/make_fixtures.py" --verify "$committed"/*/ && ok verify-committed || bad verify-committed
exit $failed
