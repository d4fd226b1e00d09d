// The reductions a Communicator offers. Avg is emulated (sum, then divide) on backends that lack it.
#pragma once

#include <string>

namespace dtrain::comm {

enum class ReduceOp { Sum, Avg, Max, Min };

std::string to_string(ReduceOp op);
// Parses "sum", "avg", "max", "min"; throws std::invalid_argument listing them otherwise.
ReduceOp parse_reduce_op(const std::string& name);

}  // namespace dtrain::comm
