# Note [std::filesystem and the official LibTorch builds]
# Against pip's torch 2.11, dtrain's programs crash at their first std::filesystem call (a jump to
# address 0) unless linked as below. That libtorch_cpu.so exports 142
# std::filesystem symbols of its own toolchain's libstdc++ (pytorch/pytorch#133437), and the linker
# binds a program's call to the first library on its command line that defines the symbol: LibTorch,
# not a libstdc++ that the compiler adds at the end. A program then runs half on one copy of
# std::filesystem and half on the other. It is worse where the compiler links libstdc++ statically
# (the GPU machine's g++): an archive named before the program's objects gives nothing, so
# "-lstdc++ first" does not help there. The cure is the shared libstdc++ by its file
# name, libstdc++.so.6, named before everything: it then defines every std:: symbol first, and comes
# before LibTorch in the order the dynamic linker looks symbols up.
#
# So: where libtorch_cpu.so exports std::filesystem (nm), a link without that is not taken, since a
# small program (cmake/StdFilesystemCheck.cpp) can run on the mixed copies and dtrain's did not;
# otherwise (Debian's LibTorch) the small program decides, run unchanged first. The link chosen is
# used for every program and passed on to the package's users; where none runs, a warning names the
# cause. bench/device/fs-probe.sh shows the bindings and any crash's stack; tests/cmake/ checks the
# choosing with programs that crash on purpose.

# dtrain_std_filesystem_link(<source> <result>): builds <source> against LibTorch (with
# DTRAIN_CHECK_WITH_TORCH defined) under each link in turn and runs it; <result> is NONE when it runs
# as it is, the first linker options under which it runs, or NONE with a warning when it runs under
# none of them (or does not build: then the build itself will say what is wrong, in full).
# <result>_EXPORTED is how many std::filesystem symbols libtorch_cpu.so exports.
function(dtrain_std_filesystem_link source result)
  set(choices NONE "-Wl,--push-state,--no-as-needed,-l:libstdc++.so.6,--pop-state")
  # LibTorch as plain files where its folder has them, not as Torch's imported targets: try_run
  # re-declares imported targets in its own project, and pip's torch 2.11 names
  # protobuf::libprotobuf in torch_cpu's link interface, a target its config never declares, so
  # the check's project failed to configure there (2026-11-27).
  set(libraries "")
  set(torch_cpu "")
  if(TORCH_INSTALL_PREFIX)
    foreach(name torch_cpu c10)
      find_library(_dtrain_stdfs_lib ${name} NO_DEFAULT_PATH NO_CACHE
                   PATHS "${TORCH_INSTALL_PREFIX}/lib" "${TORCH_INSTALL_PREFIX}/lib/${CMAKE_LIBRARY_ARCHITECTURE}")
      if(_dtrain_stdfs_lib)
        list(APPEND libraries "${_dtrain_stdfs_lib}")
        if(name STREQUAL "torch_cpu")
          set(torch_cpu "${_dtrain_stdfs_lib}")
        endif()
      endif()
      unset(_dtrain_stdfs_lib)
    endforeach()
  endif()
  set(exported 0)
  if(torch_cpu AND CMAKE_NM)
    execute_process(COMMAND ${CMAKE_NM} -D --defined-only "${torch_cpu}" OUTPUT_VARIABLE symbols
                    ERROR_QUIET RESULT_VARIABLE nm_result)
    if(nm_result EQUAL 0)
      string(REGEX MATCHALL "[^\n]*St10filesystem[^\n]*" symbols "${symbols}")
      list(LENGTH symbols exported)
    endif()
  endif()
  set(definitions -DDTRAIN_CHECK_WITH_TORCH)
  if(libraries)
    separate_arguments(torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
    list(APPEND definitions ${torch_flags})
    set(include_flag "-DINCLUDE_DIRECTORIES=${TORCH_INCLUDE_DIRS}")
  else()
    set(libraries ${TORCH_LIBRARIES})
    set(include_flag "")
  endif()
  set(found "")
  set(tried "")
  foreach(choice IN LISTS choices)
    if(choice STREQUAL "NONE" AND exported GREATER 0)
      list(APPEND tried "NONE not taken: libtorch_cpu exports ${exported} std::filesystem symbols")
      continue()
    endif()
    set(options "")
    if(NOT choice STREQUAL "NONE")
      set(options "${choice}")
    endif()
    string(MAKE_C_IDENTIFIER "${choice}" dir)
    try_run(run_result compiled ${CMAKE_BINARY_DIR}/stdfs_check/${dir} ${source}
            CMAKE_FLAGS "${include_flag}"
            COMPILE_DEFINITIONS ${definitions}
            LINK_OPTIONS ${options}
            LINK_LIBRARIES ${libraries}
            CXX_STANDARD ${CMAKE_CXX_STANDARD}
            COMPILE_OUTPUT_VARIABLE compile_output
            RUN_OUTPUT_VARIABLE run_output)
    if(NOT compiled)
      string(REGEX MATCH "[^\n]*error[^\n]*" first_error "${compile_output}")
      message(WARNING "dtrain: the std::filesystem check does not build against this LibTorch (link: "
                      "${choice}), so it is skipped: ${first_error}")
      set(${result} NONE PARENT_SCOPE)
      set(${result}_EXPORTED ${exported} PARENT_SCOPE)
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
  set(${result}_EXPORTED ${exported} PARENT_SCOPE)
endfunction()
