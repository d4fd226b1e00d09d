#!/usr/bin/env bash
# The CMake package end to end: `cmake --install` into a temporary prefix, every installed header
# includes only installed headers, examples/consumer/ configures (find_package(dtrain)) and builds
# against the prefix alone, and the installed `dtrain launch` runs it on two ranks: each rank's
# weights after 3 data-parallel steps must equal those of one process stepping with the mean of
# both ranks' gradients (the consumer checks, to 1e-6), and be the same on both ranks; and its
# strategies program trains its own modules with every exact strategy (data_parallel, zero 1-3,
# pipeline gpipe and 1f1b, dad) to one process's weights on the union batch (it checks, to 1e-5).
#   tests/package/package_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
BUILD=$(readlink -f "${1:?the build directory}")
SOURCE=$(readlink -f "${2:?the source directory}")
work=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-package-test-XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

prefix=$work/prefix
cmake --install "$BUILD" --prefix "$prefix" >"$work/install.log" || {
  cat "$work/install.log"
  fail "cmake --install failed"
}
for f in bin/dtrain lib/cmake/dtrain/dtrainConfig.cmake lib/cmake/dtrain/dtrainConfigVersion.cmake \
  lib/cmake/dtrain/dtrainTargets.cmake include/dtrain/parallel/data_parallel/DataParallel.h; do
  [ -e "$prefix/$f" ] || fail "the install has no $f"
done
# Private headers stay private, and the public ones need nothing that is not installed.
[ ! -e "$prefix/include/dtrain/comm/C10dCompat.h" ] || fail "a private header (comm/C10dCompat.h) was installed"
missing=$(cd "$prefix/include" && grep -ho '#include "dtrain/[^"]*"' -r . | sed 's/.*"\(.*\)"/\1/' | sort -u |
  while read -r h; do [ -e "$h" ] || echo "$h"; done)
[ -z "$missing" ] || fail "installed headers include headers that are not installed: $missing"
echo "installed $(find "$prefix/include" -name '*.h' | wc -l) headers, $(find "$prefix/lib" -name '*.a' | wc -l) libraries"

generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
launcher=()
if command -v ccache >/dev/null 2>&1; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
# The source tree is out of reach: the consumer is copied out and sees only the prefix.
cp -r "$SOURCE/examples/consumer" "$work/consumer"
cmake -S "$work/consumer" -B "$work/build" "${generator[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >"$work/configure.log" 2>&1 || {
  cat "$work/configure.log"
  fail "the consumer did not configure against the installed package"
}
cmake --build "$work/build" -j "${JOBS:-2}" >"$work/build.log" 2>&1 || {
  tail -n 40 "$work/build.log"
  fail "the consumer did not build against the installed package"
}
if grep -q -- "$SOURCE/src" "$work/build/compile_commands.json" "$work/build/build.ninja" 2>/dev/null; then
  fail "the consumer's build refers to the source tree $SOURCE/src"
fi

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
"$prefix/bin/dtrain" launch --nproc-per-node 2 --threads 1 --log-dir "$work/logs" -- "$work/build/consumer" 3 \
  >"$work/out" 2>"$work/err" || {
  cat "$work/out" "$work/err"
  fail "the consumer failed on two ranks"
}
for r in 0 1; do
  grep "^consumer: rank $r of 2, 3 steps" "$work/logs/rank_$r.log" || fail "rank $r printed no result"
done
w0=$(sed -n 's/^consumer: rank 0 of 2, 3 steps, weights \(.*\), max .*/\1/p' "$work/logs/rank_0.log")
w1=$(sed -n 's/^consumer: rank 1 of 2, 3 steps, weights \(.*\), max .*/\1/p' "$work/logs/rank_1.log")
if [ -z "$w0" ] || [ "$w0" != "$w1" ]; then fail "the ranks ended with different weights: '$w0' and '$w1'"; fi
# Every exact strategy over the consumer's own modules, against one process on the union batch.
"$prefix/bin/dtrain" launch --nproc-per-node 2 --threads 1 --log-dir "$work/strategy-logs" -- "$work/build/strategies" \
  >"$work/out" 2>"$work/err" || {
  cat "$work/out" "$work/err" "$work"/strategy-logs/rank_*.log
  fail "the consumer's strategies did not match one process on two ranks"
}
for r in 0 1; do
  n=$(grep -c "^strategies: rank $r of 2, .*: max difference from one process" "$work/strategy-logs/rank_$r.log" || true)
  [ "$n" = 7 ] || fail "rank $r reported $n of the 7 strategies"
done
echo "PASS: the installed package builds examples/consumer, whose programs train on two ranks like one process"
