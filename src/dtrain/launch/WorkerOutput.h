// Reading the workers' pipes without blocking, and where the bytes go: to the RankLog of the
// worker's rank, or, from mpirun, through the demultiplexer to the rank that wrote them.
#pragma once

#include <string_view>

#include "dtrain/launch/Job.h"
#include "dtrain/launch/MpiOutputDemux.h"
#include "dtrain/launch/Spawn.h"

namespace dtrain::launch {

class WorkerOutput {
 public:
  // demux: mpirun's demultiplexer, or nullptr when every worker is one rank.
  WorkerOutput(Job& job, MpiOutputDemux* demux) : job_(job), demux_(demux) {}

  // Reads whatever is ready on the worker's stdout or stderr; returns false once that pipe is
  // closed (it is closed here too, and its descriptor set to -1).
  bool pump(Worker& worker, bool is_stderr);

  // Reads what is ready, then closes the pipe even if some process still holds its other end.
  void drain_and_close(Worker& worker, bool is_stderr);

 private:
  void write(const Worker& worker, bool is_stderr, std::string_view data);
  void close(Worker& worker, bool is_stderr);

  Job& job_;
  MpiOutputDemux* demux_;
};

}  // namespace dtrain::launch
