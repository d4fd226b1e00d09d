// The one place that hides how c10d differs between LibTorch 1.13 (Debian) and 2.x: in 1.13 the
// backends (ProcessGroupGloo, ProcessGroupNCCL) derive from c10d::ProcessGroup, in 2.x from
// c10d::Backend, whose options struct moved with it; a Store must clone itself in later 2.x; and
// ProcessGroupGloo::AsyncWork's constructor grew with the versions. Everything else in comm/ codes
// against these names. See Note [c10d across LibTorch versions].
#pragma once

#include <torch/version.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

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

// Note [c10d across LibTorch versions]
// What moved between the versions dtrain builds against (Debian's 1.13, Debian trixie's 2.6,
// the 2.11 of the CUDA wheels, Debian sid's 2.14), and how each is met without naming versions
// we have not compiled against: where a signature changed, the code asks the compiler which one
// this LibTorch has (a detection trait) instead of comparing TORCH_VERSION with a guessed release.
// - The collective base class: c10d::ProcessGroup (1.13), c10d::Backend (2.x). CollectiveGroup.
// - Store::clone(), pure virtual in later 2.x (2.14 has it, 2.6 does not): "a thread-safe copy of
//   this store that points to the same underlying store". CloneableStore<Derived> declares it
//   where the base has it and forwards to Derived::clone_connection().
// - ProcessGroupGloo::AsyncWork's constructor:
//     1.13:        (outputs, profilingTitle, inputs)
//     2.6:         (outputs, opType, seq, profilingTitle, inputs)
//     2.14:        (context, outputs, opType, seq, timeout, profilingTitle, inputs), and every
//                  subclass names its input and output tensors (pure virtual getters)
//   GlooWork<AsyncWork> takes all of these and passes on what this version's constructor takes.
// - Grouped point-to-point (startCoalescing, endCoalescing): 1.13's endCoalescing takes the Works
//   send and recv returned inside the group and completes them; 2.x's takes nothing and returns the
//   one Work of the group (null in some 2.x when the group was empty). end_coalescing().
// - C++20: LibTorch 2.14 refuses to compile as C++17 (ATen.h checks __cplusplus; 2.11 does not); the
//   top-level CMakeLists.txt reads that check and raises the standard, so our code compiles as both.

template <typename G, typename = void>
struct EndCoalescingReturnsWork : std::false_type {};
template <typename G>
struct EndCoalescingReturnsWork<G, std::void_t<decltype(std::declval<G&>().endCoalescing())>>
    : std::true_type {};

// Issues the group opened by group.startCoalescing(). `issued`: the Works its sends and receives
// returned. Returns the Work of the whole group where this LibTorch makes one (2.x), else null, and
// the Works in `issued` are the ones to wait on (1.13).
template <typename G>
WorkHandle end_coalescing(G& group, std::vector<WorkHandle>& issued) {
  if constexpr (EndCoalescingReturnsWork<G>::value) {
    return group.endCoalescing();
  } else {
    group.endCoalescing(issued);
    return {};
  }
}

template <typename S, typename = void>
struct StoreHasClone : std::false_type {};
template <typename S>
struct StoreHasClone<S, std::void_t<decltype(std::declval<S&>().clone())>> : std::true_type {};

// A c10d::Store that can clone itself where this LibTorch asks for it: Derived defines
// `c10::intrusive_ptr<::c10d::Store> clone_connection()`, a new connection to the same store.
// The base is named through Derived so that it is dependent: Clang checks `override` in a template's
// definition against a base that is not, and 1.13's Store has no clone() to override.
template <typename Derived>
struct StoreBase {
  using type = ::c10d::Store;
};
template <typename Derived, bool = StoreHasClone<::c10d::Store>::value>
class CloneableStore : public ::c10d::Store {
 public:
  using ::c10d::Store::Store;
};
template <typename Derived>
class CloneableStore<Derived, true> : public StoreBase<Derived>::type {
  using Base = typename StoreBase<Derived>::type;

 public:
  using Base::Base;
  c10::intrusive_ptr<::c10d::Store> clone() override {
    return static_cast<Derived*>(this)->clone_connection();
  }
};

// The arguments of one Gloo work: what every version's AsyncWork constructor is made from.
template <typename Context>
struct GlooWorkArgs {
  std::shared_ptr<Context> context;
  at::Tensor output;
  ::c10d::OpType op;
  std::uint64_t seq;
  std::chrono::milliseconds timeout;
  const char* title;
};

// A ProcessGroupGloo::AsyncWork (passed as AsyncWork, so that this header needs no Gloo headers)
// made from GlooWorkArgs on every LibTorch; subclasses define run().
template <typename AsyncWork>
class GlooWork : public AsyncWork {
  struct Probe;

 public:
  // Whether this LibTorch's Gloo works carry c10d's sequence number (ProcessGroupGloo::seq_).
  static constexpr bool kTakesSeq =
      !std::is_constructible_v<Probe, std::vector<std::vector<at::Tensor>>, const char*>;

  template <typename Context>
  explicit GlooWork(const GlooWorkArgs<Context>& args)
      : GlooWork(arguments(args), std::make_index_sequence<std::tuple_size_v<decltype(arguments(args))>>{},
                 args.output) {}

  // Pure virtual in later 2.x, where c10d records them (its flight recorder); plain members elsewhere.
  // The input is not kept: a work must not hold its input's storage once its body has run (see
  // FunctionWork in gloo/GlooCollectives.cpp). The output AsyncWork holds anyway.
  const std::vector<at::Tensor> getInputTensors() { return {}; }
  const std::vector<at::Tensor> getOutputTensors() { return {output_}; }

 private:
  // AsyncWork with its constructors, concrete, to ask which constructor exists.
  struct Probe final : AsyncWork {
    using AsyncWork::AsyncWork;
    void run() override {}
    const std::vector<at::Tensor> getInputTensors() { return {}; }
    const std::vector<at::Tensor> getOutputTensors() { return {}; }
  };
  using Outputs = std::vector<std::vector<at::Tensor>>;

  template <typename Context>
  static auto arguments(const GlooWorkArgs<Context>& a) {
    Outputs outputs{{a.output}};
    if constexpr (std::is_constructible_v<Probe, std::shared_ptr<Context>, Outputs, ::c10d::OpType,
                                          std::uint64_t, std::chrono::milliseconds, const char*>) {
      return std::make_tuple(a.context, std::move(outputs), a.op, a.seq, a.timeout, a.title);
    } else if constexpr (std::is_constructible_v<Probe, Outputs, ::c10d::OpType, std::uint64_t,
                                                 const char*>) {
      return std::make_tuple(std::move(outputs), a.op, a.seq, a.title);
    } else {
      static_assert(std::is_constructible_v<Probe, Outputs, const char*>,
                    "this LibTorch's ProcessGroupGloo::AsyncWork has a constructor dtrain does not know; "
                    "see Note [c10d across LibTorch versions]");
      return std::make_tuple(std::move(outputs), a.title);
    }
  }

  template <typename Tuple, std::size_t... I>
  GlooWork(Tuple&& args, std::index_sequence<I...>, at::Tensor output)
      : AsyncWork(std::get<I>(std::forward<Tuple>(args))...), output_(std::move(output)) {}

  at::Tensor output_;
};

}  // namespace dtrain::comm::compat
