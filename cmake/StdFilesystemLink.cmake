# Note [std::filesystem and the official LibTorch builds]
# Against pip's torch 2.11, every dtrain program crashed at its first std::filesystem call
# (bench/RESULTS.md, eighth session). The suspected cause is pytorch/pytorch#133437: the official
# builds link a std::filesystem into libtorch_cpu.so from their older toolchain and export it, and
# libtorch_cpu comes before libstdc++ in a program's lookup order. Not confirmed: naming libstdc++
# first did not stop the crashes there. So nothing is assumed: a small program linked like dtrain's
# (cmake/StdFilesystemCheck.cpp) runs with each link below, and the first under which it completes
# is used for every program and passed on to the package's users; where none does, a warning names
# the cause. Debian's LibTorch passes with none. bench/device/fs-probe.sh shows the bindings and any
# crash's stack; tests/cmake/ checks the choosing with programs that crash on purpose.

# dtrain_std_filesystem_link(<source> <result>): builds <source> against ${TORCH_LIBRARIES} (with
# DTRAIN_CHECK_WITH_TORCH defined) under each link in turn and runs it; <result> is NONE when it runs
# as it is, the first linker options under which it runs, or NONE with a warning when it runs under
# none of them (or does not build: then the build itself will say what is wrong, in full).
function(dtrain_std_filesystem_link source result)
  set(choices NONE "-Wl,--push-state,--no-as-needed,-lstdc++,--pop-state" "-static-libstdc++")
  set(found "")
  set(tried "")
  foreach(choice IN LISTS choices)
    set(options "")
    if(NOT choice STREQUAL "NONE")
      set(options "${choice}")
    endif()
    string(MAKE_C_IDENTIFIER "${choice}" dir)
    try_run(run_result compiled ${CMAKE_BINARY_DIR}/stdfs_check/${dir} ${source}
            COMPILE_DEFINITIONS -DDTRAIN_CHECK_WITH_TORCH
            LINK_OPTIONS ${options}
            LINK_LIBRARIES ${TORCH_LIBRARIES}
            CXX_STANDARD ${CMAKE_CXX_STANDARD}
            COMPILE_OUTPUT_VARIABLE compile_output
            RUN_OUTPUT_VARIABLE run_output)
    if(NOT compiled)
      string(REGEX MATCH "[^\n]*error[^\n]*" first_error "${compile_output}")
      message(WARNING "dtrain: the std::filesystem check does not build against this LibTorch (link: "
                      "${choice}), so it is skipped: ${first_error}")
      set(${result} NONE PARENT_SCOPE)
      return()
    endif()
    if(run_result EQUAL 0)
      set(found "${choice}")
      break()
    endif()
    # The step it was in: the program prints each before taking it, unbuffered.
    string(REGEX MATCHALL "check: [a-z_][a-z_/ ]*" steps "${run_output}")
    set(last_step "check: start")
    if(steps)
      list(POP_BACK steps last_step)
    endif()
    if(run_result STREQUAL "FAILED_TO_RUN")
      set(outcome "crashed")
    else()
      set(outcome "exit ${run_result}")
    endif()
    list(APPEND tried "${choice} ${outcome} in '${last_step}'")
  endforeach()
  list(JOIN tried "; " tried)
  if(found STREQUAL "")
    message(WARNING "dtrain: a program linked against this LibTorch crashes in std::filesystem with every "
                    "link tried (${tried}); dtrain's programs will too (pytorch/pytorch#133437; "
                    "bench/device/fs-probe.sh shows where)")
    set(found NONE)
  elseif(tried)
    message(STATUS "dtrain: std::filesystem works against this LibTorch when linked with ${found} (${tried})")
  endif()
  set(${result} "${found}" PARENT_SCOPE)
endfunction()
