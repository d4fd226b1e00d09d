# What the device recipes (bench/device/libtorch2-check.sh, gpu-compare.sh) share on a GPU machine
# without network: the pip-installed torch and its NCCL found, bookworm's -dev packages carried in
# .devdeps/ (bench/device/fetch-deps.sh) unpacked beside the system, and dtrain configured against both.
#   source bench/device/setup-deps.sh; find_torch; unpack_devdeps || exit 1; configure_dtrain build-gpu "-O2 -DNDEBUG"
# Sourcing it defines the three functions and runs nothing.

# Sets TORCH_DIR, TORCH_CMAKE, NCCL_ROOT (pip's nvidia.nccl; empty without it) and GLOO_EXPORTED (how
# many Gloo symbols libtorch_cpu.so exports), and prints them.
find_torch() {
  TORCH_DIR=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))')
  TORCH_CMAKE=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
  NCCL_ROOT=$(python3 -c 'import nvidia.nccl as m;print(list(m.__path__)[0])' 2>/dev/null)
  GLOO_EXPORTED=$(nm -D --defined-only "$TORCH_DIR/lib/libtorch_cpu.so" 2>/dev/null | grep -c ' _ZN4gloo')
  echo "TORCH_DIR=$TORCH_DIR NCCL_ROOT=$NCCL_ROOT"
  echo "gloo symbols exported by libtorch_cpu: $GLOO_EXPORTED"
}

# Unpacks .devdeps/*.deb into D=/opt/dtdeps (the data set into /, where dtrain looks for it), keeps the
# system's copy of each runtime library the system has, and sets L (the libraries), GLOO_ARGS (the
# CMake arguments naming Gloo's headers); exports LD_LIBRARY_PATH, NCCL_INCLUDE_DIR and NCCL_LIB_DIR.
# Needs find_torch first. Returns 1 when libtorch_cpu.so exports no Gloo to link against.
unpack_devdeps() {
  D=/opt/dtdeps
  mkdir -p $D
  local f so real dev sys
  for f in .devdeps/*.deb; do case "$f" in *dataset-fashion*) dpkg -x "$f" / ;; *) dpkg -x "$f" $D ;; esac; done
  L=$D/usr/lib/x86_64-linux-gnu
  rm -f $L/libgloo.so*
  # Runtime libraries the system has: use its copies (one libcrypto and one libz in every process).
  for so in libcrypto.so.3:libcrypto.so libssl.so.3:libssl.so libz.so.1:libz.so; do
    real=${so%%:*}; dev=${so##*:}
    sys=$(ldconfig -p | awk -v n="$real" '$1==n && /x86-64/ {print $NF; exit}')
    if [ -n "$sys" ]; then rm -f $L/$real*; ln -sf "$sys" $L/$dev; fi
  done
  # libjpeg: where the machine has its own with headers (Ubuntu's libjpeg-turbo8, JPEG_LIB_VERSION 80),
  # dtrain compiles against those headers, so it must link that library too, not bookworm's libjpeg62
  # ("Wrong JPEG library version: library is 62, caller expects 80", 2026-11-27).
  if [ -f /usr/include/jpeglib.h ] && ldconfig -p | grep -q 'libjpeg.so.8 '; then
    rm -f $L/libjpeg.so* $D/usr/include/jpeglib.h $D/usr/include/jerror.h $D/usr/include/jmorecfg.h \
      $D/usr/include/jpegint.h $D/usr/include/x86_64-linux-gnu/jconfig.h
  fi
  ls -la $L | head -40
  GLOO_ARGS=(-DDTRAIN_GLOO_INCLUDE_DIR=$D/usr/include)
  [ -d "$TORCH_DIR/include/gloo" ] && GLOO_ARGS=(-DDTRAIN_GLOO_INCLUDE_DIR=$TORCH_DIR/include)
  if [ "$GLOO_EXPORTED" = 0 ]; then
    echo "libtorch_cpu.so exports no Gloo symbols: give DTRAIN_GLOO_LIBRARY a Gloo of LibTorch's date"
    return 1
  fi
  export LD_LIBRARY_PATH=$L${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export NCCL_INCLUDE_DIR=$NCCL_ROOT/include NCCL_LIB_DIR=$NCCL_ROOT/lib
}

# configure_dtrain BUILD_DIR OPT: a Ninja Release build whose CMAKE_CXX_FLAGS_RELEASE is OPT, against
# the pip torch for compute capability 9.0 (H100, H200), without MPI and the C++ benchmarks.
# Needs unpack_devdeps first.
configure_dtrain() {
  cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="$2" \
    -DCMAKE_PREFIX_PATH="$TORCH_CMAKE;$D/usr" -DOPENSSL_ROOT_DIR=$D/usr -DDTRAIN_WITH_MPI=OFF \
    -DDTRAIN_BUILD_BENCH=OFF -DTORCH_CUDA_ARCH_LIST=9.0 "${GLOO_ARGS[@]}" 2>&1 |
    grep -v "^-- \(Looking\|Performing\|Check\)" | tail -40
}
