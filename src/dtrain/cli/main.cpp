// dtrain: one tool for every strategy. `dtrain --help` lists the subcommands; every one exits with
// the statuses of Note [Exit codes]. A program of one's own runs the same command line over the
// models and data sets it registers (cli/Main.h).
#include "dtrain/cli/Main.h"

int main(int argc, char** argv) {
  return dtrain::cli::run(argc, argv);
}
