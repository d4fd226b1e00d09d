// One node of a multi-node job for the launcher tests, in its own process (a launch() owns its
// process's signal handlers, so two nodes cannot share one): runs launch::launch() and exits
// with the job's exit code.
// Usage: dtrain_launch_node NODE_RANK NNODES MASTER_PORT LOG_DIR -- PROGRAM ARGS...
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>

#include "dtrain/config/Environment.h"
#include "dtrain/launch/Launcher.h"

int main(int argc, char** argv) {
  if (argc < 7 || std::strcmp(argv[5], "--") != 0) {
    std::cerr << "usage: dtrain_launch_node NODE_RANK NNODES MASTER_PORT LOG_DIR -- PROGRAM ARGS...\n";
    return 2;
  }
  dtrain::launch::LaunchOptions options;
  options.node_rank = std::atoi(argv[1]);
  options.nnodes = std::atoi(argv[2]);
  options.master_port = std::atoi(argv[3]);
  options.log_dir = argv[4];
  options.command.assign(argv + 6, argv + argc);
  options.environment = dtrain::config::process_environment();
  options.status_line = false;
  try {
    return dtrain::launch::launch(options).exit_code;
  } catch (const std::exception& e) {
    std::cerr << "dtrain_launch_node: " << e.what() << std::endl;
    return 1;
  }
}
