// The one place that hides how c10d differs between LibTorch 1.13 (Debian) and 2.x: in 1.13 the
// backends (ProcessGroupGloo, ProcessGroupNCCL) derive from c10d::ProcessGroup, in 2.x from
// c10d::Backend, whose options struct moved with it. Everything else in comm/ codes against these names.
#pragma once

#include <torch/version.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

namespace dtrain::comm::compat {

// The class that runs collectives for one group of ranks: the base of ProcessGroupGloo/NCCL.
#if TORCH_VERSION_MAJOR >= 2
using CollectiveGroup = ::c10d::Backend;
#else
using CollectiveGroup = ::c10d::ProcessGroup;
#endif

using GroupPtr = c10::intrusive_ptr<CollectiveGroup>;
using StorePtr = c10::intrusive_ptr<::c10d::Store>;
using WorkHandle = c10::intrusive_ptr<::c10d::Work>;

}  // namespace dtrain::comm::compat
