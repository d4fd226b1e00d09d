// The pipeline's wire protocol (Note [Pipeline messages]): headers, sends and receives, and a
// stage's state packed into bytes.
#include "dtrain/parallel/pipeline/PipelineMessages.h"

#include <fmt/format.h>
#include <torch/serialize/archive.h>

#include <mutex>
#include <sstream>
#include <stdexcept>

#include "dtrain/util/ArchiveCode.h"
#include "dtrain/util/Clock.h"

namespace dtrain::parallel::pipeline::wire {

torch::Tensor make_header(HeaderKind kind, const torch::Tensor& tensor) {
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

Header parse_header(const torch::Tensor& header) {
  auto h = header.accessor<std::int64_t, 1>();
  Header out;
  out.kind = h[0];
  out.dtype = static_cast<torch::ScalarType>(h[1]);
  for (std::int64_t d = 0; d < h[2]; ++d) out.shape.push_back(h[3 + d]);
  return out;
}

void Sends::post(torch::Tensor tensor, int dst, int tag) {
  tensor = tensor.detach().contiguous();
  works_.push_back(comm_->send(tensor, dst, tag, /*async_op=*/true));
  tensors_.push_back(std::move(tensor));
}

double Sends::wait_all() {
  const auto start = util::Clock::now();
  for (auto& w : works_) w->wait();
  works_.clear();
  tensors_.clear();
  finished_ = 0;
  return util::seconds_since(start);
}

bool Sends::poll() {
  while (finished_ < works_.size()) {
    if (!works_[finished_]->poll()) return true;
    ++finished_;
  }
  return false;
}

torch::Tensor receive(comm::Communicator& comm, std::vector<std::int64_t> shape, torch::ScalarType dtype,
                      int src, int tag, double* seconds, torch::Device device) {
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

Receives::~Receives() {
  if (posted_.empty()) return;
  static std::mutex mutex;
  static auto* abandoned = new std::vector<Posted>();
  std::lock_guard<std::mutex> lock(mutex);
  for (auto& [tag, posted] : posted_) abandoned->push_back(std::move(posted));
}

void Receives::post(const std::vector<std::int64_t>& shape, torch::ScalarType dtype, int src, int tag) {
  if (posted(tag)) return;
  auto tensor = torch::empty(shape, torch::TensorOptions().dtype(dtype).device(device_));
  auto work = comm_->recv(tensor, src, tag, /*async_op=*/true);
  posted_.emplace(tag, Posted{std::move(tensor), std::move(work), false});
}

torch::Tensor Receives::take(const std::vector<std::int64_t>& shape, torch::ScalarType dtype, int src,
                             int tag, double* seconds) {
  post(shape, dtype, src, tag);
  auto node = posted_.extract(tag);
  const auto start = util::Clock::now();
  node.mapped().work->wait();
  if (seconds) *seconds += util::seconds_since(start);
  return std::move(node.mapped().tensor);
}

void Receives::poll() {
  for (auto& [tag, posted] : posted_) {
    if (posted.arrived) continue;
    if (!posted.work->poll()) return;
    posted.arrived = true;
  }
}

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

}  // namespace dtrain::parallel::pipeline::wire
