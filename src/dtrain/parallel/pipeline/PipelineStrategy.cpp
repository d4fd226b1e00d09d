// The pipeline step: this rank's batch joins its pipeline's batch, the stage runs its schedule of
// micro-batch forwards and backwards, receiving activations from the stage before and gradients
// from the stage after, then the stage's gradients are all-reduced across pipeline replicas and
// its optimizer steps. See Note [Pipeline schedules] and Note [Pipeline messages].
#include "dtrain/parallel/pipeline/PipelineStrategy.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/optim/lbfgs.h>
#include <torch/serialize/archive.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <sstream>
#include <stdexcept>
#include <typeinfo>

#include "dtrain/optim/Autocast.h"
#include "dtrain/optim/OptimizerState.h"
#include "dtrain/parallel/MicroBatches.h"
#include "dtrain/parallel/ModuleSync.h"
#include "dtrain/parallel/Registry.h"
#include "dtrain/util/ArchiveCode.h"
#include "dtrain/util/Clock.h"

namespace dtrain::parallel::pipeline {

// Note [Pipeline messages]
// Every transfer is a tagged send/recv inside the pipeline's communicator (ranked by stage), so
// messages of different kinds and micro-batches never match each other. Sends are asynchronous
// (the tensor is kept until the step waits for all of them) and receives block: with the
// schedules of Note [Pipeline schedules] no rank then waits for a send that waits for it. A
// receiver must know what it receives:
//   - the step's batch: every rank's batch size is all-gathered over the world first (one
//     integer per rank), so stage 0 knows the rows of the inputs each stage sends it and the last
//     stage those of the targets (their trailing shape and dtype are its own batch's), and every
//     rank knows the pipeline's micro-batch rows and the global batch the loss is divided by;
//   - activations: the first micro-batch of a step carries a small header (dtype and shape);
//     later micro-batches of the step have the same trailing shape and their own rows;
//   - gradients: the shape and dtype of the activation the stage sent, so no header at all.
// PyTorch's torch.distributed.pipelining infers shapes once at stage construction with meta
// tensors, and DeepSpeed's engine sends the tensor meta once on the first step and then assumes
// fixed shapes; the per-step header costs one 96-byte message per link and lets micro-batches of
// uneven rows (a batch M does not divide) and batches of any size (an epoch's last) through.
// Evaluation sends a header with every message, since its batches are few and of any size.

// Note [Receives posted ahead]
// A stage posts the receive of its next forward's activation and of its next backward's gradient
// as soon as their shapes are known (after the receive before them, or after the forward whose
// output the gradient is for), not when it reaches them. On Gloo a send moves no byte until the
// receiver has posted its receive: Gloo's TCP pair answers a send with "recv ready" from the
// receiver, and the data then leaves from the sender's device thread, which on a core busy with
// the sender's next micro-batch waits for the scheduler. Posted ahead, the "recv ready" is already
// there when the send is posted, and the sender's own thread writes the data at once. MPI's
// eager and rendezvous protocols gain the same way (a receive already posted is matched on
// arrival). The cost is memory: a buffer of the next micro-batch's activation exists while the
// schedule's own are held, so 1F1B holds S - s activations and one incoming on stages after the
// first (at most S, as before), and one gradient buffer arrives an action early. The order of
// every message is unchanged, so the results are bit for bit those of receiving when reached.
// Measured gpipe S = 2 over Gloo on 2 cores, A B A B (bench/RESULTS.md, issue 14, ninth session):
// the idle fraction at M = 8 fell from 1.53-1.57x to 1.35-1.36x of (S-1)/(M+S-1), but samples/s
// did not change (926-930 before, 898-929 after): there the bytes now arrive while the receiver
// computes, and Gloo's device thread that reads them takes its core from that computation. Where
// a core is free for it (more cores than stages, GPUs), the overlap is a gain.

// Note [Transfers kept moving between layers]
// Over mpi, a message above the eager limit moves in steps its sender takes only inside MPI calls
// (reading the receiver's acknowledgement, scheduling fragments), and within a host without Open
// MPI's single-copy mechanism (CMA: ptrace rules and containers turn it off, and CI runs without
// it) each fragment is pushed through shared memory by the sender and copied out by the receiver,
// each inside its own MPI calls. A stage that posts its activation's send and then computes the
// next micro-batch therefore held the next stage back for that whole computation: gpipe S = 2,
// M = 8 over mpi without single-copy idled 0.45-0.56 of the step (0.10-0.29 with it) at 510-570
// samples/s against 830-960. So while a step runs, the stage polls its outstanding sends and
// posted receives after each layer's forward and, through a hook on each layer's output, after
// each layer's backward: Work::poll(), one test that blocks on nothing; the first unfinished one
// stops the round, since one MPI call advances every request of the process. On gloo, whose
// send and recv are moved by Gloo's own threads, poll() answers false at once and costs a virtual
// call. Where the transfers finished, nothing is called. A layer's forward or backward is the
// grain: one long layer still delays its stage's messages by its own length. How much one call
// moves is Open MPI's send pipeline depth, which dtrain raises (Note [Open MPI's send pipeline
// depth] in comm/mpi/MpiRuntime.cpp).
// A progress thread that entered MPI on a timer while transfers were open was tried first and
// kept out: on this host its 1 ms wake-ups cost 10-15% of a 16 MB sendrecv (bench/RESULTS.md,
// issue 14, tenth session). A failed poll is left to the wait that follows, which reports it.

namespace {

constexpr int kTagInputs = 1;
constexpr int kTagTargets = 2;
constexpr int kTagHeader = 3;
constexpr int kTagEvalControl = 4;
constexpr int kTagEvalHeader = 5;
constexpr int kTagEvalData = 6;
constexpr int kTagSaveLength = 7;
constexpr int kTagSaveBytes = 8;
constexpr int kMaxMicroBatches = (1 << 20) - 1;
// Pass times a rank keeps before the ranks replay them together: 64 steps of 8 micro-batches,
// one all-gather of 8 KB a rank (Note [Replaying the schedule]).
constexpr std::size_t kReplayValues = 1024;
constexpr int kTagActivation = 1 << 20;  // + micro-batch
constexpr int kTagGradient = 2 << 20;    // + micro-batch

constexpr std::int64_t kHeaderLength = 12;  // kind, dtype, ndim, up to 9 dimensions
constexpr std::int64_t kMaxDims = kHeaderLength - 3;
enum HeaderKind : std::int64_t { kData = 1, kStop = 2 };

const config::ChoiceSet kSchedules{"gpipe", "1f1b"};
const config::ChoiceSet kBalances{"parameters", "time", "cut_points"};

torch::Tensor make_header(HeaderKind kind, const torch::Tensor& tensor = {}) {
  auto header = torch::zeros({kHeaderLength}, torch::kLong);
  auto h = header.accessor<std::int64_t, 1>();
  h[0] = kind;
  if (tensor.defined()) {
    if (tensor.dim() > kMaxDims) {
      throw std::invalid_argument(fmt::format(
          "pipeline: an activation of {} dimensions crosses a stage boundary; at most {} are supported",
          tensor.dim(), kMaxDims));
    }
    h[1] = static_cast<std::int64_t>(tensor.scalar_type());
    h[2] = tensor.dim();
    for (std::int64_t d = 0; d < tensor.dim(); ++d) h[3 + d] = tensor.size(d);
  }
  return header;
}

struct Header {
  std::int64_t kind = 0;
  torch::ScalarType dtype = torch::kFloat;
  std::vector<std::int64_t> shape;
};

Header parse_header(const torch::Tensor& header) {
  auto h = header.accessor<std::int64_t, 1>();
  Header out;
  out.kind = h[0];
  out.dtype = static_cast<torch::ScalarType>(h[1]);
  for (std::int64_t d = 0; d < h[2]; ++d) out.shape.push_back(h[3 + d]);
  return out;
}

// Asynchronous sends of one step, each tensor kept alive until its send completes.
class Sends {
 public:
  explicit Sends(comm::Communicator* comm) : comm_(comm) {}
  void post(torch::Tensor tensor, int dst, int tag) {
    tensor = tensor.detach().contiguous();
    works_.push_back(comm_->send(tensor, dst, tag, /*async_op=*/true));
    tensors_.push_back(std::move(tensor));
  }
  // Returns the seconds spent waiting.
  double wait_all() {
    const auto start = util::Clock::now();
    for (auto& w : works_) w->wait();
    works_.clear();
    tensors_.clear();
    finished_ = 0;
    return util::seconds_since(start);
  }
  // Tests the sends in posting order up to the first unfinished one (Note [Transfers kept moving
  // between layers]); true when one was unfinished.
  bool poll() {
    while (finished_ < works_.size()) {
      if (!works_[finished_]->poll()) return true;
      ++finished_;
    }
    return false;
  }

 private:
  comm::Communicator* comm_;
  std::vector<comm::WorkPtr> works_;
  std::vector<torch::Tensor> tensors_;
  std::size_t finished_ = 0;  // works_[0, finished_) are known to be done
};

// Into a tensor on `device`: the model's for data, the CPU for headers and lengths.
torch::Tensor receive(comm::Communicator& comm, std::vector<std::int64_t> shape, torch::ScalarType dtype,
                      int src, int tag, double* seconds, torch::Device device = torch::kCPU) {
  auto tensor = torch::empty(shape, torch::TensorOptions().dtype(dtype).device(device));
  const auto start = util::Clock::now();
  // Asynchronous, then waited for: a blocking point-to-point call on gloo polls a Work that
  // completes only inside wait() for the whole poll budget (parallel.poll_wait_us, 50 ms by
  // default; Note [Polling before blocking] in comm/c10d) before it waits.
  comm.recv(tensor, src, tag, /*async_op=*/true)->wait();
  if (seconds) *seconds += util::seconds_since(start);
  return tensor;
}

Header receive_header(comm::Communicator& comm, int src, int tag, double* seconds) {
  return parse_header(receive(comm, {kHeaderLength}, torch::kLong, src, tag, seconds));
}

// Receives of one step posted before they are needed (Note [Receives posted ahead]), by tag.
class Receives {
 public:
  // Activations and gradients land on `device`, the model's.
  Receives(comm::Communicator* comm, torch::Device device) : comm_(comm), device_(device) {}
  Receives(const Receives&) = delete;
  Receives& operator=(const Receives&) = delete;
  // A step that fails (a loss of the wrong shape, a peer gone) between posting a receive and
  // taking it leaves the receive posted, and the backend may still write into its tensor: the
  // tensor and its Work are kept, reachable, for the rest of the process, which ends with the
  // step's error.
  ~Receives() {
    if (posted_.empty()) return;
    static std::mutex mutex;
    static auto* abandoned = new std::vector<Posted>();
    std::lock_guard<std::mutex> lock(mutex);
    for (auto& [tag, posted] : posted_) abandoned->push_back(std::move(posted));
  }
  bool posted(int tag) const { return posted_.count(tag) > 0; }
  void post(const std::vector<std::int64_t>& shape, torch::ScalarType dtype, int src, int tag) {
    if (posted(tag)) return;
    auto tensor = torch::empty(shape, torch::TensorOptions().dtype(dtype).device(device_));
    auto work = comm_->recv(tensor, src, tag, /*async_op=*/true);
    posted_.emplace(tag, Posted{std::move(tensor), std::move(work), false});
  }
  // The receive posted for `tag` (posted now if it was not), once it has arrived.
  torch::Tensor take(const std::vector<std::int64_t>& shape, torch::ScalarType dtype, int src, int tag,
                     double* seconds) {
    post(shape, dtype, src, tag);
    auto node = posted_.extract(tag);
    const auto start = util::Clock::now();
    node.mapped().work->wait();
    if (seconds) *seconds += util::seconds_since(start);
    return std::move(node.mapped().tensor);
  }
  // Tests the posted receives up to the first unfinished one (Note [Transfers kept moving between
  // layers]).
  void poll() {
    for (auto& [tag, posted] : posted_) {
      if (posted.arrived) continue;
      if (!posted.work->poll()) return;
      posted.arrived = true;
    }
  }

 private:
  struct Posted {
    torch::Tensor tensor;
    comm::WorkPtr work;
    bool arrived = false;  // poll() found it finished
  };
  comm::Communicator* comm_;
  torch::Device device_;
  std::map<int, Posted> posted_;
};

std::vector<std::int64_t> with_rows(std::vector<std::int64_t> shape, std::int64_t rows) {
  shape.at(0) = rows;
  return shape;
}

std::vector<std::int64_t> shape_of(const torch::Tensor& t) {
  return t.sizes().vec();
}

// A named set of tensors as bytes (and back): how a stage's optimizer state travels to rank 0.
torch::Tensor pack(const std::map<std::string, torch::Tensor>& named) {
  torch::serialize::OutputArchive archive;
  std::string names;
  std::int64_t i = 0;
  for (const auto& [name, tensor] : named) {
    names += name + "\n";
    // From the CPU, so rank 0 reads it whatever GPU the stage trains on.
    archive.write("t" + std::to_string(i++), tensor.to(torch::kCPU), /*is_buffer=*/true);
  }
  archive.write(
      "names",
      torch::from_blob(names.data(), {static_cast<std::int64_t>(names.size())}, torch::kUInt8).clone(),
      /*is_buffer=*/true);
  std::ostringstream out;
  archive.save_to(out);
  const auto bytes = out.str();
  return torch::from_blob(const_cast<char*>(bytes.data()), {static_cast<std::int64_t>(bytes.size())},
                          torch::kUInt8)
      .clone();
}

std::map<std::string, torch::Tensor> unpack(const torch::Tensor& bytes) {
  std::istringstream in(
      std::string(static_cast<const char*>(bytes.data_ptr()), static_cast<std::size_t>(bytes.numel())));
  torch::serialize::InputArchive archive;
  util::load_archive_without_code(archive, in, "a pipeline stage's packed state");
  torch::Tensor names_tensor;
  archive.read("names", names_tensor, /*is_buffer=*/true);
  const std::string names(static_cast<const char*>(names_tensor.data_ptr()),
                          static_cast<std::size_t>(names_tensor.numel()));
  std::map<std::string, torch::Tensor> out;
  std::istringstream lines(names);
  std::string name;
  std::int64_t i = 0;
  while (std::getline(lines, name)) {
    torch::Tensor t;
    archive.read("t" + std::to_string(i++), t, /*is_buffer=*/true);
    out.emplace(name, t);
  }
  return out;
}

}  // namespace

struct PipelineStrategy::Entry {
  std::string name;  // the model's own name, "layers.1.weight"
  int stage = 0;
  std::vector<std::int64_t> shape;
  torch::ScalarType dtype = torch::kFloat;
  bool buffer = false;
};

// One micro-batch between its forward and its backward on this stage.
struct PipelineStrategy::InFlight {
  torch::Tensor input;   // the received activation (a leaf that collects its gradient); undefined on stage 0
  torch::Tensor output;  // the sent activation, or on the last stage the weighted, scaled loss
};

void describe_options(config::OptionVisitor& v, PipelineOptions& o) {
  v.choice("schedule", o.schedule, kSchedules);
  v.integer("stages", o.stages, config::IntRange{0, 1 << 16});
  v.integer("micro_batches", o.micro_batches, config::IntRange{1, kMaxMicroBatches});
  v.choice("balance", o.balance, kBalances);
  v.int_list("cut_points", o.cut_points, 1, /*allow_empty=*/true);
}

int check_options(const PipelineOptions& o, int world) {
  const int stages = o.stages == 0 ? world : o.stages;
  if (world % stages != 0) {
    throw std::invalid_argument(fmt::format(
        "parallel.pipeline.stages: {} stages do not divide the world size {}; the world must be replicas x "
        "stages, so choose stages among the divisors of {} (or 0 for one pipeline over all ranks)",
        stages, world, world));
  }
  if (o.balance != "cut_points" && !o.cut_points.empty()) {
    throw std::invalid_argument(
        fmt::format("parallel.pipeline.cut_points: applies to balance: cut_points, not balance: {}; set "
                    "parallel.pipeline.balance: cut_points or leave cut_points out",
                    o.balance));
  }
  if (o.balance == "cut_points" && static_cast<int>(o.cut_points.size()) != stages - 1) {
    throw std::invalid_argument(
        fmt::format("parallel.pipeline.cut_points: {} stages need {} cut points (the first layer of stages "
                    "1..{}), found {}",
                    stages, stages - 1, stages - 1, o.cut_points.size()));
  }
  return stages;
}

PipelineStrategy::PipelineStrategy(StrategyContext context)
    : context_(std::move(context)),
      options_(context_.parallel.options.get<PipelineOptions>("pipeline")),
      schedule_(parse_schedule(options_.schedule)),
      precision_(context_.precision, context_.comm),
      world_(context_.comm) {
  if (!world_) {
    throw std::invalid_argument(
        "parallel.strategy: pipeline needs a communicator (start workers with --nproc)");
  }
  if (world_->backend() == "nccl" && world_->size() > 1) {
    throw std::invalid_argument(
        "parallel.strategy: pipeline passes activations and gradients as tagged point-to-point messages "
        "received ahead of need, and NCCL matches point-to-point messages by their order, not their tag; "
        "use parallel.backend: gloo or mpi (tensors on a GPU cross through host memory)");
  }
  auto& model = *context_.model;
  for (const auto& p : model.parameters()) {
    device_ = p.device();
    break;
  }
  if (typeid(model) != typeid(models::Network)) {
    throw std::invalid_argument(
        fmt::format("parallel.strategy: pipeline cuts a model's sequence of layers, but model {} computes "
                    "its forward pass "
                    "otherwise (its class overrides Network::forward); choose another model or strategy",
                    model.kind()));
  }
  if (context_.parallel.accumulation_steps != 1) {
    throw std::invalid_argument(
        fmt::format("parallel.accumulation_steps: pipeline splits each batch into "
                    "parallel.pipeline.micro_batches itself; "
                    "found accumulation_steps {}, set it to 1 and raise micro_batches instead",
                    context_.parallel.accumulation_steps));
  }
  const int world = world_->size();
  const int rank = world_->rank();
  layout_.stages = check_options(options_, world);
  layout_.replicas = world / layout_.stages;
  layout_.stage = rank % layout_.stages;
  layout_.replica = rank / layout_.stages;
  const auto children = model.layers()->named_children();
  const int layers = static_cast<int>(children.size());
  if (layout_.stages > layers) {
    throw std::invalid_argument(
        fmt::format("parallel.pipeline.stages: {} stages but model {} has {} layers; use at most {} stages",
                    layout_.stages, model.kind(), layers, layers));
  }
  const auto before = world_->stats();

  // Every rank starts from rank 0's weights (they may have been built from other seeds).
  verify_same_module(*world_, model);
  broadcast_coalesced(*world_, module_state(model), 0);

  parameter_counts_ = layer_parameter_counts(model);
  if (options_.balance == "cut_points") {
    layout_.bounds = bounds_from_cut_points(options_.cut_points, layers, layout_.stages);
  } else if (options_.balance == "time") {
    // Rank 0 measures and broadcasts, so every rank cuts at the same layers.
    auto seconds = torch::zeros({layers}, torch::kDouble);
    if (rank == 0) {
      const auto measured = measure_layer_seconds(model, context_.input);
      for (int i = 0; i < layers; ++i) seconds[i] = measured[i];
    }
    world_->broadcast(seconds, 0);
    layout_.bounds = balanced_bounds(
        std::vector<double>(seconds.data_ptr<double>(), seconds.data_ptr<double>() + layers), layout_.stages);
  } else {
    layout_.bounds = balanced_bounds(parameter_counts_, layout_.stages);
  }
  const auto stage_of_layer = [&](int layer) {
    return static_cast<int>(std::upper_bound(layout_.bounds.begin(), layout_.bounds.end(), layer) -
                            layout_.bounds.begin()) -
           1;
  };

  // The model's parameters and buffers by layer; a tensor two stages share cannot be cut.
  std::map<const void*, std::pair<int, std::string>> owner;
  std::set<std::string> in_layers;
  const auto all_layers = model.stages();
  for (int i = 0; i < layers; ++i) {
    const int stage = stage_of_layer(i);
    const std::string prefix = "layers." + children[i].key() + ".";
    auto add = [&](const std::string& rel, const torch::Tensor& t, bool buffer) {
      const auto name = prefix + rel;
      const auto [it, fresh] = owner.emplace(t.unsafeGetTensorImpl(), std::make_pair(stage, name));
      if (!fresh && it->second.first != stage) {
        throw std::invalid_argument(fmt::format(
            "parallel.pipeline.{}: {} and {} are one tensor shared by stages {} and {}; cut the model "
            "elsewhere (parallel.pipeline.balance: cut_points)",
            options_.balance == "cut_points" ? "cut_points" : "balance", it->second.second, name,
            it->second.first, stage));
      }
      if (!fresh) return;
      in_layers.insert(name);
      entries_.push_back({name, stage, shape_of(t), t.scalar_type(), buffer});
      if (stage != layout_.stage) return;
      (buffer ? buffers_ : parameters_).emplace_back(name, t);
    };
    for (const auto& p : children[i].value()->named_parameters(/*recurse=*/true))
      add(p.key(), p.value(), false);
    for (const auto& b : children[i].value()->named_buffers(/*recurse=*/true)) add(b.key(), b.value(), true);
    if (stage == layout_.stage) layers_.push_back(all_layers[i]);
  }
  for (const auto& p : model.named_parameters(/*recurse=*/true)) {
    if (!in_layers.count(p.key())) {
      throw std::invalid_argument(
          fmt::format("parallel.strategy: pipeline cuts a model's sequence of layers, but model {} has "
                      "parameter {} outside "
                      "them; choose another model or strategy",
                      model.kind(), p.key()));
    }
  }

  // Pipelines are consecutive ranks; a stage group holds one stage of every pipeline.
  const int stages = layout_.stages;
  for (int r = 0; r < layout_.replicas; ++r) {
    std::vector<int> ranks;
    for (int s = 0; s < stages; ++s) ranks.push_back(r * stages + s);
    auto sub = world_->split(ranks);
    if (sub) pipe_ = std::move(sub);
  }
  for (int s = 0; s < stages; ++s) {
    std::vector<int> ranks;
    for (int r = 0; r < layout_.replicas; ++r) ranks.push_back(r * stages + s);
    auto sub = world_->split(ranks);
    if (sub) group_ = std::move(sub);
  }
  own_comm_ += comm::difference(world_->stats(), before);

  // Other stages' weights are not this rank's to keep: their memory goes back.
  {
    torch::NoGradGuard no_grad;
    std::set<std::string> mine;
    for (const auto& [name, t] : parameters_) mine.insert(name);
    for (const auto& [name, t] : buffers_) mine.insert(name);
    for (auto& p : model.named_parameters(/*recurse=*/true)) {
      if (!mine.count(p.key())) p.value().set_data(torch::empty({0}, p.value().options()));
    }
    for (auto& b : model.named_buffers(/*recurse=*/true)) {
      if (!mine.count(b.key())) b.value().set_data(torch::empty({0}, b.value().options()));
    }
  }

  std::vector<torch::Tensor> trainable;
  for (const auto& [name, p] : parameters_) trainable.push_back(p);
  optimizer_ = context_.make_optimizer(trainable);
  if (dynamic_cast<torch::optim::LBFGS*>(optimizer_.get())) {
    throw std::invalid_argument(
        "optim.name: lbfgs needs the whole gradient and loss at every line-search evaluation, which a "
        "pipeline's "
        "stages do not have; use sgd, adam or adamw with parallel.strategy: pipeline");
  }
  check_precision_optimizer(context_.precision, *optimizer_);
}

PipelineStrategy::~PipelineStrategy() = default;

void PipelineStrategy::set_learning_rate(double lr) {
  optim::set_learning_rate(*optimizer_, lr);
}

// This stage's layers under train.precision, as MixedPrecision::forward runs the whole network
// (see Note [fp16 numerics]): the same casts at the same layers, so a pipeline computes the
// numbers one process computes. bf16 activations cross stage boundaries as bf16 (half the bytes).
torch::Tensor PipelineStrategy::run_stage(const torch::Tensor& inputs) {
  auto x = inputs;
  if (layout_.stage == 0 && context_.model->channels_last_on_cpu() && x.dim() == 4 && x.device().is_cpu()) {
    x = x.contiguous(at::MemoryFormat::ChannelsLast);
  }
  const bool last = layout_.stage == layout_.stages - 1;
  // See Note [Transfers kept moving between layers].
  const auto layer_done = [&](torch::Tensor& output) {
    if (!between_layers_) return;
    between_layers_();
    if (output.requires_grad()) {
      output.register_hook([this](const torch::Tensor&) {
        if (between_layers_) between_layers_();
      });
    }
  };
  switch (context_.precision) {
    case optim::Precision::Fp32:
      for (auto& layer : layers_) {
        x = layer.forward(x);
        layer_done(x);
      }
      return x;
    case optim::Precision::Bf16: {
      {
        optim::AutocastGuard autocast(true, torch::kBFloat16, inputs.device().type());
        for (auto& layer : layers_) {
          x = layer.forward(x);
          layer_done(x);
        }
      }
      return last && torch::isFloatingType(x.scalar_type()) ? x.to(torch::kFloat) : x;
    }
    case optim::Precision::Fp16:
      for (auto& layer : layers_) {
        x = layer.forward(round_through_half(x));
        layer_done(x);
      }
      return last ? round_through_half(x) : x;
  }
  throw std::logic_error("pipeline: unknown precision");
}

std::vector<comm::CommStats> PipelineStrategy::traffic_snapshot() const {
  return {world_->stats(), pipe_ ? pipe_->stats() : comm::CommStats{},
          group_ ? group_->stats() : comm::CommStats{}};
}

void PipelineStrategy::count_own_communication(const std::vector<comm::CommStats>& before,
                                               StepResult* result) {
  const auto now = traffic_snapshot();
  comm::CommStats step;
  for (std::size_t i = 0; i < now.size(); ++i) step += comm::difference(now[i], before[i]);
  own_comm_ += step;
  if (result) result->bytes_sent = step.total().wire_bytes;
}

void PipelineStrategy::gather_batch(const data::Batch& batch, const std::vector<std::int64_t>& sizes,
                                    torch::Tensor& inputs, torch::Tensor& targets, StepTiming& timing) {
  const int stages = layout_.stages;
  const int stage = layout_.stage;
  const int last = stages - 1;
  const auto base = static_cast<std::size_t>(layout_.replica * stages);
  Sends sends(pipe_.get());
  if (stage != 0) sends.post(batch.inputs, 0, kTagInputs);
  if (stage != last) sends.post(batch.targets, last, kTagTargets);
  auto collect = [&](const torch::Tensor& own, int tag) {
    std::vector<torch::Tensor> parts;
    for (int t = 0; t < stages; ++t) {
      if (t == stage) {
        parts.push_back(own);
        continue;
      }
      parts.push_back(receive(*pipe_, with_rows(shape_of(own), sizes[base + t]), own.scalar_type(), t, tag,
                              &timing.communication, own.device()));
    }
    return parts.size() == 1 ? parts.front() : torch::cat(parts);
  };
  if (stage == 0) inputs = collect(batch.inputs, kTagInputs);
  if (stage == last) targets = collect(batch.targets, kTagTargets);
  timing.communication += sends.wait_all();
}

void PipelineStrategy::allreduce_gradients(StepTiming& timing) {
  if (!group_ || group_->size() < 2) return;
  std::map<torch::ScalarType, std::vector<torch::Tensor>> by_dtype;
  for (auto& [name, p] : parameters_) {
    if (!p.requires_grad()) continue;
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    by_dtype[p.scalar_type()].push_back(p.grad());
  }
  for (auto& [dtype, grads] : by_dtype) {
    std::vector<torch::Tensor> flat_parts;
    for (const auto& g : grads) flat_parts.push_back(g.reshape({-1}));
    auto flat = torch::cat(flat_parts);
    const auto start = util::Clock::now();
    group_->allreduce(flat);
    timing.communication += util::seconds_since(start);
    std::int64_t offset = 0;
    for (auto& g : grads) {
      g.copy_(flat.slice(0, offset, offset + g.numel()).view_as(g));
      offset += g.numel();
    }
  }
}

StepResult PipelineStrategy::train_step(const data::Batch& batch) {
  const auto start = util::Clock::now();
  const auto traffic_before = traffic_snapshot();
  StepResult result;
  result.samples = batch.size();
  const int stages = layout_.stages;
  const int stage = layout_.stage;
  const int last = stages - 1;
  const int micro_batches = options_.micro_batches;

  // Every rank's batch size, so that each knows the pipeline's rows and the global batch.
  auto own_size = torch::tensor({static_cast<std::int64_t>(batch.size())}, torch::kLong);
  auto sizes_tensor = torch::empty({world_->size()}, torch::kLong);
  {
    const auto t0 = util::Clock::now();
    world_->allgather(own_size, sizes_tensor);
    result.timing.communication += util::seconds_since(t0);
  }
  const std::vector<std::int64_t> sizes(sizes_tensor.data_ptr<std::int64_t>(),
                                        sizes_tensor.data_ptr<std::int64_t>() + world_->size());
  std::int64_t global_rows = 0;
  for (const auto s : sizes) global_rows += s;
  const auto base = static_cast<std::size_t>(layout_.replica * stages);
  std::int64_t rows = 0;
  std::int64_t own_offset = 0;
  for (int t = 0; t < stages; ++t) {
    if (t == stage) own_offset = rows;
    rows += sizes[base + t];
  }
  if (rows < micro_batches) {
    throw std::invalid_argument(
        fmt::format("parallel.pipeline.micro_batches: {} micro-batches but pipeline {}'s batch has {} "
                    "samples (its {} ranks' "
                    "batches together); lower micro_batches or raise data.batch_size",
                    micro_batches, layout_.replica, rows, stages));
  }
  const auto ranges = micro_batch_ranges(rows, micro_batches);

  // BatchNorm statistics: every replica of a stage starts the step from the first pipeline's,
  // as data_parallel's broadcast_buffers does.
  if (group_ && group_->size() > 1 && !buffers_.empty()) {
    const auto t0 = util::Clock::now();
    std::vector<torch::Tensor> buffers;
    for (const auto& [name, b] : buffers_) buffers.push_back(b);
    broadcast_coalesced(*group_, buffers, 0);
    result.timing.communication += util::seconds_since(t0);
  }

  torch::Tensor inputs, targets;
  gather_batch(batch, sizes, inputs, targets, result.timing);

  optimizer_->zero_grad();
  std::vector<torch::Tensor> parameters;
  for (const auto& [name, p] : parameters_) parameters.push_back(p);
  const double loss_scale = precision_.loss_scale();
  double idle = 0.0;
  double loss_sum = 0.0;
  // This stage's seconds in each micro-batch's forward, then in each one's backward (Note
  // [Replaying the schedule]).
  std::vector<double> passes(2 * ranges.size(), 0.0);
  std::vector<torch::Tensor> outputs(ranges.size());
  const auto schedule_start = util::Clock::now();
  {
    const auto half = precision_.half_weights(parameters);
    Sends sends(pipe_.get());
    Receives ahead(pipe_.get(), device_);
    // See Note [Transfers kept moving between layers]; cleared when the schedule ends, normally or
    // by an exception, before `sends` and `ahead` go.
    between_layers_ = [&] {
      try {
        if (!sends.poll()) ahead.poll();
      } catch (const std::exception&) {
        // The failed transfer's own wait reports it.
      }
    };
    struct Clear {
      std::function<void()>& f;
      ~Clear() { f = nullptr; }
    } clear{between_layers_};
    std::map<int, InFlight> held;
    Header incoming;  // the step's activation header from the stage before
    bool have_header = false;
    bool sent_header = false;
    const auto actions = stage_schedule(schedule_, stages, stage, micro_batches);
    // Posts the receive of the next forward's activation and of the next backward's gradient
    // after action i, where they are known (Note [Receives posted ahead]).
    const auto post_ahead = [&](std::size_t i) {
      bool forward_seen = false, backward_seen = false;
      for (std::size_t j = i + 1; j < actions.size() && !(forward_seen && backward_seen); ++j) {
        const int n = actions[j].micro_batch;
        if (actions[j].pass == PipelineAction::Pass::Forward) {
          if (forward_seen) continue;
          forward_seen = true;
          if (stage == 0 || !have_header) continue;
          ahead.post(with_rows(incoming.shape, ranges[n].second - ranges[n].first), incoming.dtype, stage - 1,
                     kTagActivation + n);
        } else {
          if (backward_seen) continue;
          backward_seen = true;
          const auto it = held.find(n);
          if (stage == last || it == held.end() || !torch::isFloatingType(it->second.output.scalar_type())) {
            continue;
          }
          ahead.post(shape_of(it->second.output), it->second.output.scalar_type(), stage + 1,
                     kTagGradient + n);
        }
      }
    };
    for (std::size_t i = 0; i < actions.size(); ++i) {
      const auto& action = actions[i];
      const int m = action.micro_batch;
      const auto [begin, end] = ranges[m];
      if (action.pass == PipelineAction::Pass::Forward) {
        InFlight flight;
        torch::Tensor x;
        if (stage == 0) {
          x = inputs.slice(0, begin, end);
        } else {
          double waited = 0.0;
          if (!have_header) {
            incoming = receive_header(*pipe_, stage - 1, kTagHeader, &waited);
            have_header = true;
          }
          x = ahead.take(with_rows(incoming.shape, end - begin), incoming.dtype, stage - 1,
                         kTagActivation + m, &waited);
          post_ahead(i);
          idle += waited;
          result.timing.communication += waited;
          if (torch::isFloatingType(x.scalar_type())) x.requires_grad_(true);
          flight.input = x;
        }
        const auto t0 = util::Clock::now();
        auto y = run_stage(x);
        if (stage == last) {
          auto l = context_.loss(y, targets.slice(0, begin, end));
          if (l.numel() != 1) {
            throw std::invalid_argument(fmt::format(
                "the loss function returned a tensor of shape {}; it must reduce to one value (mean over the "
                "batch)",
                c10::str(l.sizes())));
          }
          // Each micro-batch's mean loss weighted by its share of the global batch: the gradients
          // summed over micro-batches and replicas are those of the global batch's mean loss.
          l = l.reshape({}) * (static_cast<double>(end - begin) / static_cast<double>(global_rows));
          loss_sum += l.detach().item<double>();
          outputs[m] = y.detach();
          flight.output = loss_scale != 1.0 ? l * loss_scale : l;
          passes[m] = util::seconds_since(t0);
        } else {
          if (y.dim() == 0 || y.size(0) != end - begin) {
            throw std::invalid_argument(
                fmt::format("pipeline: stage {}'s output has shape {}, not {} rows first; every layer must "
                            "keep the batch "
                            "as its first dimension",
                            stage, c10::str(y.sizes()), end - begin));
          }
          passes[m] = util::seconds_since(t0);
          if (!sent_header) {
            sends.post(make_header(kData, y), stage + 1, kTagHeader);
            sent_header = true;
          }
          sends.post(y, stage + 1, kTagActivation + m);
          flight.output = y;
        }
        result.timing.forward += passes[m];
        held.emplace(m, std::move(flight));
        peak_held_ = std::max(peak_held_, static_cast<int>(held.size()));
        post_ahead(i);
      } else {
        auto node = held.extract(m);
        auto& flight = node.mapped();
        if (stage == last) {
          const auto t0 = util::Clock::now();
          if (flight.output.requires_grad()) flight.output.backward();
          passes[ranges.size() + m] = util::seconds_since(t0);
        } else if (torch::isFloatingType(flight.output.scalar_type())) {
          double waited = 0.0;
          auto g = ahead.take(shape_of(flight.output), flight.output.scalar_type(), stage + 1,
                              kTagGradient + m, &waited);
          post_ahead(i);
          idle += waited;
          result.timing.communication += waited;
          const auto t0 = util::Clock::now();
          // A stage whose output does not depend on anything trainable (a Flatten alone) has
          // nothing to propagate.
          if (flight.output.requires_grad()) torch::autograd::backward({flight.output}, {g});
          passes[ranges.size() + m] = util::seconds_since(t0);
        }
        result.timing.backward += passes[ranges.size() + m];
        if (flight.input.defined() && flight.input.requires_grad()) {
          auto grad = flight.input.grad();
          sends.post(grad.defined() ? grad : torch::zeros_like(flight.input), stage - 1, kTagGradient + m);
        }
      }
    }
    result.timing.communication += sends.wait_all();
  }
  const double schedule_seconds = util::seconds_since(schedule_start);
  const double busy_seconds = result.timing.forward + result.timing.backward;

  allreduce_gradients(result.timing);
  bool step = true;
  if (precision_.scaling()) {
    step = precision_.finish_gradients(parameters, &result.timing.communication);
    result.skipped = precision_.last_skipped();
    result.loss_scale = precision_.loss_scale();
  }
  // The global batch's mean loss: the last stages' sums, on every rank.
  auto loss = torch::tensor({stage == last ? loss_sum : 0.0}, torch::kDouble);
  {
    const auto t0 = util::Clock::now();
    world_->allreduce(loss);
    result.timing.communication += util::seconds_since(t0);
  }
  result.loss = loss.item<double>();
  if (step) optimizer_->step();
  result.closure_evaluations = 1;
  if (stage == last) {
    const auto all = outputs.size() == 1 ? outputs.front() : torch::cat(outputs);
    result.outputs = all.slice(0, own_offset, own_offset + batch.size());
  }
  // The first step allocates and meets the peers for the first time: not the pipeline's steady state.
  const bool steady = steps_++ > 0;
  if (steady) {
    recorded_passes_.insert(recorded_passes_.end(), passes.begin(), passes.end());
    if (recorded_passes_.size() >= std::max(kReplayValues, passes.size())) {
      const auto t0 = util::Clock::now();
      replay_recorded();
      result.timing.communication += util::seconds_since(t0);
    }
  }
  const double seconds = util::seconds_since(start);
  result.timing.set_update_to_rest(seconds);
  count_own_communication(traffic_before, &result);
  if (steady) {
    idle_seconds_ += idle;
    step_seconds_ += seconds;
    busy_seconds_ += busy_seconds;
    schedule_seconds_ += schedule_seconds;
  }
  return result;
}

std::vector<EvalModel> PipelineStrategy::eval_models() const {
  return {EvalModel{"model", layout_.stages - 1}};
}

void PipelineStrategy::begin_evaluation() {
  context_.model->eval();
  evaluating_ = true;
}

torch::Tensor PipelineStrategy::eval_forward(std::size_t, const torch::Tensor& inputs) {
  torch::NoGradGuard no_grad;
  const int stages = layout_.stages;
  if (stages == 1) return run_stage(inputs);
  TORCH_INTERNAL_ASSERT(layout_.replica == 0 && layout_.stage == stages - 1,
                        "eval_forward runs on the model's owner, the first pipeline's last stage");
  Sends sends(pipe_.get());
  sends.post(make_header(kData, inputs), 0, kTagEvalControl);
  sends.post(inputs, 0, kTagEvalData);
  const auto rows = inputs.size(0);
  const auto ranges =
      micro_batch_ranges(rows, static_cast<int>(std::min<std::int64_t>(options_.micro_batches, rows)));
  std::vector<torch::Tensor> outputs;
  for (std::size_t m = 0; m < ranges.size(); ++m) {
    const auto header = receive_header(*pipe_, stages - 2, kTagEvalHeader, nullptr);
    outputs.push_back(
        run_stage(receive(*pipe_, header.shape, header.dtype, stages - 2, kTagEvalData, nullptr, device_)));
  }
  sends.wait_all();
  return outputs.size() == 1 ? outputs.front() : torch::cat(outputs);
}

// The first pipeline's stages other than the last answer its evaluation batches until it says
// stop: stage 0 splits each batch into micro-batches, so the stages work on them side by side.
void PipelineStrategy::serve_evaluation() {
  torch::NoGradGuard no_grad;
  const int stages = layout_.stages;
  const int stage = layout_.stage;
  const int owner = stages - 1;
  const bool next_is_owner = stage + 1 == owner;
  Sends sends(pipe_.get());
  auto forward_and_pass = [&](const torch::Tensor& x) {
    const auto y = run_stage(x);
    sends.post(make_header(kData, y), stage + 1, kTagEvalHeader);
    sends.post(y, stage + 1, kTagEvalData);
  };
  while (true) {
    const auto header = receive_header(*pipe_, stage == 0 ? owner : stage - 1,
                                       stage == 0 ? kTagEvalControl : kTagEvalHeader, nullptr);
    if (header.kind == kStop) {
      if (!next_is_owner) sends.post(make_header(kStop), stage + 1, kTagEvalHeader);
      break;
    }
    const auto x = receive(*pipe_, header.shape, header.dtype, stage == 0 ? owner : stage - 1, kTagEvalData,
                           nullptr, device_);
    if (stage == 0) {
      const auto rows = x.size(0);
      for (const auto& [begin, end] :
           micro_batch_ranges(rows, static_cast<int>(std::min<std::int64_t>(options_.micro_batches, rows)))) {
        forward_and_pass(x.slice(0, begin, end));
      }
    } else {
      forward_and_pass(x);
    }
    sends.wait_all();
  }
  sends.wait_all();
}

void PipelineStrategy::end_evaluation() {
  if (evaluating_ && layout_.stages > 1 && layout_.replica == 0) {
    if (layout_.stage == layout_.stages - 1) {
      Sends sends(pipe_.get());
      sends.post(make_header(kStop), 0, kTagEvalControl);
      sends.wait_all();
    } else {
      serve_evaluation();
    }
  }
  evaluating_ = false;
  context_.model->train();
}

std::map<std::string, torch::Tensor> PipelineStrategy::model_state() const {
  std::map<std::string, torch::Tensor> state;
  for (int s = 0; s < layout_.stages; ++s) {
    // Stage s of the first pipeline (world rank s) is the root; the others receive its values.
    std::vector<torch::Tensor> tensors;
    std::vector<std::string> names;
    if (s == layout_.stage && layout_.replica == 0) {
      for (const auto* named : {&parameters_, &buffers_}) {
        for (const auto& [name, t] : *named) {
          names.push_back(name);
          tensors.push_back(t.detach().clone());
        }
      }
    } else {
      // Parameters first, then buffers, as the root lists them.
      for (const bool buffers : {false, true}) {
        for (const auto& e : entries_) {
          if (e.stage != s || e.buffer != buffers) continue;
          names.push_back(e.name);
          tensors.push_back(torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype).device(device_)));
        }
      }
    }
    broadcast_coalesced(*world_, tensors, s);
    for (std::size_t i = 0; i < names.size(); ++i) state[names[i]] = tensors[i];
  }
  return state;
}

void PipelineStrategy::save(io::Checkpoint& checkpoint) const {
  for (const auto& [name, tensor] : model_state()) checkpoint.set_tensor("model." + name, tensor);
  const auto mine = optim::named_optimizer_state(*optimizer_, parameters_);
  const int rank = world_->rank();
  if (rank == 0) {
    for (const auto& [key, value] : mine) checkpoint.set_tensor(key, value);
    for (int s = 1; s < layout_.stages; ++s) {
      const auto length = receive(*world_, {1}, torch::kLong, s, kTagSaveLength, nullptr);
      const auto bytes =
          receive(*world_, {length.item<std::int64_t>()}, torch::kUInt8, s, kTagSaveBytes, nullptr);
      for (const auto& [key, value] : unpack(bytes)) checkpoint.set_tensor(key, value);
    }
  } else if (layout_.replica == 0) {
    Sends sends(world_.get());
    auto bytes = pack(mine);
    sends.post(torch::tensor({bytes.numel()}, torch::kLong), 0, kTagSaveLength);
    sends.post(bytes, 0, kTagSaveBytes);
    sends.wait_all();
  }
  precision_.save(checkpoint);
}

void PipelineStrategy::load(const io::Checkpoint& checkpoint) {
  torch::NoGradGuard no_grad;
  for (auto* named : {&parameters_, &buffers_}) {
    for (auto& [name, t] : *named) {
      const auto& saved = checkpoint.tensor("model." + name);
      if (saved.sizes() != t.sizes()) {
        throw io::CheckpointError(fmt::format("checkpoint: model.{} has shape {}, this model's {}", name,
                                              c10::str(saved.sizes()), c10::str(t.sizes())));
      }
      t.copy_(saved);
    }
  }
  std::map<std::string, torch::Tensor> entries;
  for (const auto& [key, value] : checkpoint.tensors()) {
    if (key.rfind("optimizer", 0) == 0) entries.emplace(key, value);
  }
  optim::load_named_optimizer_state(*optimizer_, parameters_, entries);
  precision_.load(checkpoint);
}

// Note [Replaying the schedule] (PipelineSchedule.h) in the strategy: every rank keeps its
// stage's pass times of the steps after the first; every kReplayValues of them (and in
// metrics()) the ranks all-gather them and each replays every pipeline's schedule of every
// step, summing the spans. Every rank runs the same steps with the same micro-batches, so the
// lengths agree. pipeline/replay_idle_fraction/stage<s> is 1 - the stage's compute over those
// spans: the idle fraction these passes allow, unequal stages and a slow pass included, with
// free transfers. pipeline/schedule_over_replay is the schedule time measured over it: what the
// transfers, the waiting for them and the bookkeeping between passes add (1 if nothing).
void PipelineStrategy::replay_recorded() {
  const int stages = layout_.stages;
  const auto per_step = 2 * static_cast<std::size_t>(options_.micro_batches);
  const auto per_rank = static_cast<std::int64_t>(recorded_passes_.size());
  auto local = torch::tensor(recorded_passes_, torch::kDouble);
  auto all = torch::empty({per_rank * world_->size()}, torch::kDouble);
  world_->allgather(local, all);
  recorded_passes_.clear();
  const auto a = all.accessor<double, 1>();
  const auto steps = static_cast<std::size_t>(per_rank) / per_step;
  const int micro_batches = options_.micro_batches;
  std::vector<std::vector<double>> forward(stages, std::vector<double>(micro_batches));
  auto backward = forward;
  for (int replica = 0; replica < world_->size() / stages; ++replica) {
    for (std::size_t step = 0; step < steps; ++step) {
      for (int s = 0; s < stages; ++s) {
        const auto at = static_cast<std::int64_t>(
            (replica * stages + s) * static_cast<std::size_t>(per_rank) + step * per_step);
        for (int m = 0; m < micro_batches; ++m) {
          forward[s][m] = a[at + m];
          backward[s][m] = a[at + micro_batches + m];
        }
      }
      replay_seconds_ += replay_schedule(schedule_, forward, backward);
    }
  }
}

// Note [Measuring the bubble]
// GPipe's (S-1)/(M+S-1) is the share of the schedule's time a stage computes nothing, with equal
// stages and free transfers. pipeline/idle_fraction counts only the time a stage blocks in a
// receive, over the whole step: it misses the last stage's share at the end of the schedule (it
// has finished its backward passes and waits for the first stage's in the loss's all-reduce,
// which is not a receive) and dilutes every stage's with the step's other work (gathering the
// batch, the all-reduces, the optimizer). pipeline/schedule_idle_fraction is the formula's own
// quantity: 1 - the stage's forward and backward computation over the pipeline's schedule time,
// the longest of its stages' (the stages start together: the step's batch sizes are all-gathered
// just before), so transfer time and waiting count as idle wherever they fall.
// pipeline/compute_imbalance is the busiest stage's computation over the stages' mean (1 when they
// compute alike): GPipe's formula assumes 1. Above it, a heavier cut or a slower core (a VM's
// virtual CPUs differ by up to 22% on the same product, bench/RESULTS.md, issue 14) sets the
// pace, and the others wait for it; the log's note names that stage.
std::map<std::string, double> PipelineStrategy::metrics() {
  if (!recorded_passes_.empty()) replay_recorded();
  constexpr int kFields = 5;
  auto local = torch::tensor(
      {idle_seconds_, step_seconds_, static_cast<double>(peak_held_), busy_seconds_, schedule_seconds_},
      torch::kDouble);
  auto all = torch::empty({kFields * world_->size()}, torch::kDouble);
  world_->allgather(local, all);
  const int stages = layout_.stages;
  const int replicas = world_->size() / stages;
  std::vector<double> idle(stages, 0.0), total(stages, 0.0), busy(stages, 0.0);
  std::vector<double> schedule(replicas, 0.0);  // per replica: its longest stage's schedule time
  stage_peak_held_.assign(stages, 0.0);
  auto a = all.accessor<double, 1>();
  for (int r = 0; r < world_->size(); ++r) {
    const int s = r % stages;
    idle[s] += a[kFields * r];
    total[s] += a[kFields * r + 1];
    stage_peak_held_[s] = std::max(stage_peak_held_[s], a[kFields * r + 2]);
    busy[s] += a[kFields * r + 3];
    schedule[r / stages] = std::max(schedule[r / stages], a[kFields * r + 4]);
  }
  double schedule_total = 0.0;
  for (const double t : schedule) schedule_total += t;
  std::map<std::string, double> out;
  stage_idle_fraction_.assign(stages, 0.0);
  replay_idle_fraction_.assign(stages, 0.0);
  for (int s = 0; s < stages; ++s) {
    stage_idle_fraction_[s] = total[s] > 0.0 ? idle[s] / total[s] : 0.0;
    out[fmt::format("pipeline/idle_fraction/stage{}", s)] = stage_idle_fraction_[s];
    out[fmt::format("pipeline/schedule_idle_fraction/stage{}", s)] =
        schedule_total > 0.0 ? 1.0 - busy[s] / schedule_total : 0.0;
    replay_idle_fraction_[s] = replay_seconds_ > 0.0 ? 1.0 - busy[s] / replay_seconds_ : 0.0;
    out[fmt::format("pipeline/replay_idle_fraction/stage{}", s)] = replay_idle_fraction_[s];
    out[fmt::format("pipeline/peak_micro_batches/stage{}", s)] = stage_peak_held_[s];
  }
  out["pipeline/expected_idle_fraction"] = expected_idle_fraction(stages, options_.micro_batches);
  const double mean_busy = std::accumulate(busy.begin(), busy.end(), 0.0) / static_cast<double>(stages);
  busiest_stage_ = static_cast<int>(std::max_element(busy.begin(), busy.end()) - busy.begin());
  compute_imbalance_ = mean_busy > 0.0 ? busy[busiest_stage_] / mean_busy : 0.0;
  out["pipeline/compute_imbalance"] = compute_imbalance_;
  schedule_over_replay_ = replay_seconds_ > 0.0 ? schedule_total / replay_seconds_ : 0.0;
  out["pipeline/schedule_over_replay"] = schedule_over_replay_;
  return out;
}

std::map<std::string, std::string> PipelineStrategy::notes() const {
  std::map<std::string, std::string> out;
  out["pipeline/stages"] =
      fmt::format("{} x {} stages ({}, {} micro-batches, balance {}): {}", layout_.replicas, layout_.stages,
                  schedule_name(schedule_), options_.micro_batches, options_.balance,
                  describe_bounds(layout_.bounds, parameter_counts_));
  if (!stage_idle_fraction_.empty()) {
    std::vector<std::string> parts;
    for (std::size_t s = 0; s < stage_idle_fraction_.size(); ++s) {
      parts.push_back(fmt::format("stage {} idle {:.3f}, peak {} micro-batches held", s,
                                  stage_idle_fraction_[s], static_cast<int>(stage_peak_held_[s])));
    }
    out["pipeline/idle"] = fmt::format("{}; expected idle (S-1)/(M+S-1) = {:.3f}", fmt::join(parts, "; "),
                                       expected_idle_fraction(layout_.stages, options_.micro_batches));
    if (schedule_over_replay_ > 0.0) {
      double mean = 0.0;
      for (const double f : replay_idle_fraction_)
        mean += f / static_cast<double>(replay_idle_fraction_.size());
      out["pipeline/idle"] += fmt::format(
          "; replayed with these passes and free transfers: idle {:.3f} a stage on average, the schedule "
          "{:.3f}x "
          "the replay",
          mean, schedule_over_replay_);
    }
    if (compute_imbalance_ > 0.0 && layout_.stages > 1) {
      out["pipeline/idle"] += fmt::format(
          "; stage {} computes the most, {:.3f}x the stages' mean (GPipe's formula assumes 1; above it a "
          "heavier cut or a slower core sets the pace: compare parallel.pipeline.balance: time)",
          busiest_stage_, compute_imbalance_);
    }
  }
  return out;
}

MemoryFootprint PipelineStrategy::memory_footprint() const {
  std::vector<torch::Tensor> parameters, gradients;
  for (const auto& [name, p] : parameters_) {
    parameters.push_back(p);
    gradients.push_back(p.grad());
  }
  MemoryFootprint footprint;
  footprint.parameters = optim::unique_storage_bytes(parameters);
  footprint.gradients = optim::unique_storage_bytes(gradients);
  footprint.optimizer_state = optim::unique_storage_bytes(optim::optimizer_state_tensors(*optimizer_));
  return footprint;
}

namespace {

StrategyInfo pipeline_info() {
  StrategyInfo info{
      "pipeline",
      "the model's layers cut into stages across ranks; micro-batches flow forward and back (GPipe, "
      "1F1B); world = replicas x stages",
      /*exact=*/true, /*needs_communicator=*/true, [](StrategyContext c) -> std::unique_ptr<Strategy> {
        return std::make_unique<PipelineStrategy>(std::move(c));
      }};
  // One data holder per rank (a pipeline's batch is its ranks' batches); also what `dtrain train
  // --nproc` checks before it starts workers.
  info.data_holders = [](const config::ParallelConfig& parallel, int world) {
    check_options(parallel.options.get<PipelineOptions>("pipeline"), world);
    return world;
  };
  info.tagged_point_to_point = true;  // activations and gradients by tag, received ahead
  return info;
}

}  // namespace

}  // namespace dtrain::parallel::pipeline

namespace dtrain::parallel {
DTRAIN_REGISTER_STRATEGY(pipeline, pipeline::pipeline_info(), pipeline::PipelineOptions{},
                         pipeline::describe_options);
}  // namespace dtrain::parallel
