#!/usr/bin/env bash
# Why a program crashes at its first std::filesystem call against pip's LibTorch 2.11 when it binds
# to the wheels' copy (pytorch/pytorch#133437: the wheels export the std::filesystem they link
# statically). Run on the GPU machine by bench/device/libtorch2-check.sh, twice:
#   bench/device/fs-probe.sh TORCH_DIR              before the build: which copy of std::filesystem a
#       program linked like dtrain's binds to, and whether it crashes, for each compiler and link order
#   bench/device/fs-probe.sh --dtrain BUILD_DIR     after it: the same for one of dtrain's crashing tests
# Every crash prints its stack (segv_backtrace.c, preloaded: the machine has no debugger). Not part of
# the product; about 30 seconds.
set -u
here=$(cd "$(dirname "$0")" && pwd)
work=${FS_PROBE_DIR:-/tmp/fs-probe}
mkdir -p "$work"
cc -shared -fPIC -O1 -o "$work/segv_backtrace.so" "$here/segv_backtrace.c" || exit 1
preload=$work/segv_backtrace.so

bindings() {  # exe args...: which libraries exe's own std::filesystem references bind to
  local exe=$1
  LD_DEBUG=bindings LD_DEBUG_OUTPUT="$work/bindings" env LD_PRELOAD="${EXTRA_PRELOAD:-}" "$@" >/dev/null 2>&1
  cat "$work"/bindings.* 2>/dev/null | grep -F "binding file $exe " | grep "St10filesystem" |
    awk '{ for (i = 1; i < NF; i++) if ($i == "to") lib = $(i + 1); print lib, $(NF - 1) }' | sort -u >"$work/bound"
  echo "    its std::filesystem symbols bind to: $(awk '{print $1}' "$work/bound" | sort | uniq -c | tr '\n' ' ')"
  grep -E "_M_split_cmpts|temp_directory_path" "$work/bound" | sed 's/^/    /'
  rm -f "$work"/bindings.*
}
run() {  # label exe args...
  local label=$1
  shift
  echo "--- $label"
  LD_PRELOAD="$preload${EXTRA_PRELOAD:+:$EXTRA_PRELOAD}" timeout 60 "$@" >"$work/out.txt" 2>&1
  local rc=$?
  tail -n 30 "$work/out.txt"
  echo "--- $label: exit $rc"
  bindings "$@"
}

if [ "${1:-}" = "--dtrain" ]; then
  build=$2
  exe=$build/tests/config/dtrain_config_tests
  [ -x "$exe" ] || { echo "fs-probe: $exe not built"; exit 1; }
  echo "=== NEEDED of $exe (the lookup order after the program itself)"
  readelf -d "$exe" | awk '/NEEDED/ {print $NF}' | tr '\n' ' '
  echo
  echo "=== the link CMake chose: $(grep DTRAIN_STDFS_LINK: "$build/CMakeCache.txt")"
  run "dtrain_config_tests YamlFile.*" "$exe" --gtest_filter='YamlFile*'
  EXTRA_PRELOAD=$(g++ -print-file-name=libstdc++.so.6) run "dtrain_config_tests YamlFile.*, libstdc++ preloaded" "$exe" --gtest_filter='YamlFile*'
  run "dtrain info" "$build/bin/dtrain" info
  exit 0
fi

torch=$1
lib=$torch/lib
echo "=== std::filesystem in $lib/libtorch_cpu.so (type letter: T strong, W weak)"
nm -D --defined-only "$lib/libtorch_cpu.so" | awk '$3 ~ /St10filesystem/ {print $2}' | sort | uniq -c
nm -D --defined-only "$lib/libtorch_cpu.so" | grep -E ' _ZNSt10filesystem7__cxx114path14_M_split_cmptsEv| _ZNSt10filesystem21temp_directory_pathEv'
echo "=== compilers"
compilers=()
for c in g++ /opt/gcc/bin/g++ /usr/bin/g++; do
  command -v "$c" >/dev/null || continue
  real=$(readlink -f "$(command -v "$c")")
  echo "$c -> $real: $("$c" --version | head -1); libstdc++ $("$c" -print-file-name=libstdc++.so.6)"
  file "$real" | cut -c1-160
  case " ${compilers[*]:-} " in *" $real "*) ;; *) compilers+=("$real") ;; esac
done
head -c 600 /opt/gcc/bin/g++ 2>/dev/null | strings | head -8
abi=$(python3 -c 'import torch;print(int(torch._C._GLIBCXX_USE_CXX11_ABI))' 2>/dev/null || echo 1)
echo "torch._C._GLIBCXX_USE_CXX11_ABI = $abi"
torch_link=(-L"$lib" -Wl,-rpath,"$lib" -Wl,--no-as-needed -ltorch_cpu -lc10 -Wl,--as-needed)
i=0
for cxx in "${compilers[@]}"; do
  i=$((i + 1))
  flags=(-std=c++17 -O1 -D_GLIBCXX_USE_CXX11_ABI="$abi")
  "$cxx" "${flags[@]}" -o "$work/plain$i" "$here/../../cmake/StdFilesystemCheck.cpp" &&
    run "$cxx, no LibTorch" "$work/plain$i"
  "$cxx" "${flags[@]}" -o "$work/torch$i" "$here/../../cmake/StdFilesystemCheck.cpp" "${torch_link[@]}" &&
    run "$cxx, LibTorch linked as dtrain links it" "$work/torch$i"
  "$cxx" "${flags[@]}" -o "$work/first$i" "$here/../../cmake/StdFilesystemCheck.cpp" -Wl,--no-as-needed -l:libstdc++.so.6 "${torch_link[@]}" &&
    run "$cxx, libstdc++ named before LibTorch" "$work/first$i"
  EXTRA_PRELOAD=$("$cxx" -print-file-name=libstdc++.so.6) run "$cxx, LibTorch linked, libstdc++ preloaded" "$work/torch$i"
  "$cxx" "${flags[@]}" -o "$work/static$i" "$here/../../cmake/StdFilesystemCheck.cpp" "${torch_link[@]}" -static-libstdc++ &&
    run "$cxx, LibTorch linked, -static-libstdc++" "$work/static$i"
done
