# Note [Sources without LibTorch]
# The precompiled <torch/torch.h> is a 570 MB .gch, and loading it costs a translation unit about
# 7 s on one core (10 s when two compile at once) before its first own line: a torch-free file such
# as io/Crc32c.cpp took 10 s with it and 0.2 s without. A file that uses LibTorch saves more than
# that (io/Checkpoint.cpp: 20 s with the PCH, 31 s without), so the PCH stays for those. A third of
# the sources (config, launch, experiment, most of io and of the CLI's tests) include nothing of
# LibTorch; dtrain_skip_pch_where_torch_free() finds them at configure time by following their
# #include lines through src/ and tests/ and marks them SKIP_PRECOMPILE_HEADERS.
#
# The scan decides speed only, never correctness: a file marked torch-free compiles its own includes
# as written (one that used LibTorch without including it would fail to compile, here and without a
# PCH alike), and a file that gains a LibTorch include after the scan compiles correctly without the
# PCH, only slower, until the next configure.

# Sets `out` to ON where `file` includes a LibTorch header directly or through headers of this tree.
function(_dtrain_includes_torch file out)
  get_property(known GLOBAL PROPERTY "_DTRAIN_TORCH:${file}" SET)
  if(known)
    get_property(value GLOBAL PROPERTY "_DTRAIN_TORCH:${file}")
    set(${out} ${value} PARENT_SCOPE)
    return()
  endif()
  # Marked before the walk, so that headers including each other end it.
  set_property(GLOBAL PROPERTY "_DTRAIN_TORCH:${file}" OFF)
  file(STRINGS "${file}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]")
  get_filename_component(here "${file}" DIRECTORY)
  set(result OFF)
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*[<\"]([^>\"]+)[>\"].*" "\\1" name "${line}")
    if(name MATCHES "^(torch|ATen|c10|caffe2)/")
      set(result ON)
      break()
    endif()
    foreach(root "${DTRAIN_SOURCE_DIR}/src" "${DTRAIN_SOURCE_DIR}/tests" "${here}")
      if(EXISTS "${root}/${name}" AND NOT IS_DIRECTORY "${root}/${name}")
        _dtrain_includes_torch("${root}/${name}" included)
        if(included)
          set(result ON)
        endif()
        break()
      endif()
    endforeach()
    if(result)
      break()
    endif()
  endforeach()
  set_property(GLOBAL PROPERTY "_DTRAIN_TORCH:${file}" ${result})
  set(${out} ${result} PARENT_SCOPE)
endfunction()

# Marks the sources of `target` that include nothing of LibTorch SKIP_PRECOMPILE_HEADERS.
function(dtrain_skip_pch_where_torch_free target)
  get_target_property(sources ${target} SOURCES)
  get_target_property(source_dir ${target} SOURCE_DIR)
  foreach(source IN LISTS sources)
    if(NOT source MATCHES "\\.(cpp|cc|cxx)$")
      continue()
    endif()
    if(IS_ABSOLUTE "${source}")
      set(path "${source}")
    else()
      set(path "${source_dir}/${source}")
    endif()
    if(NOT EXISTS "${path}")
      continue()  # generated: left with the PCH
    endif()
    _dtrain_includes_torch("${path}" uses_torch)
    if(NOT uses_torch)
      set_property(SOURCE "${source}" TARGET_DIRECTORY ${target} PROPERTY SKIP_PRECOMPILE_HEADERS ON)
    endif()
  endforeach()
endfunction()
