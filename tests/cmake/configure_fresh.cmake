# Configures the project SOURCE into an emptied BINARY with the build's compiler, generator, C++
# standard and LibTorch (TORCH_DIR), printing what it printed; fails when the configure fails.
file(REMOVE_RECURSE "${BINARY}")
execute_process(COMMAND "${CMAKE_COMMAND}" -S "${SOURCE}" -B "${BINARY}" -G "${GENERATOR}"
                        "-DCMAKE_CXX_COMPILER=${CXX}" "-DTorch_DIR=${TORCH_DIR}" "-DCMAKE_CXX_STANDARD=${CXX_STANDARD}"
                RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT status EQUAL 0)
  message(FATAL_ERROR "configuring ${SOURCE} failed (${status})")
endif()
