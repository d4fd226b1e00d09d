// Evaluation through the first pipeline: its last stage owns the model and evaluates the whole
// set, feeding batches to stage 0, while the pipeline's other stages serve it until it says stop.
#include <torch/torch.h>

#include <algorithm>

#include "dtrain/parallel/MicroBatches.h"
#include "dtrain/parallel/pipeline/PipelineMessages.h"
#include "dtrain/parallel/pipeline/PipelineStrategy.h"

namespace dtrain::parallel::pipeline {

using namespace wire;

std::vector<EvalModel> PipelineStrategy::eval_models() const {
  return {EvalModel{"model", layout_.rank_of(0, layout_.stages - 1)}};
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

}  // namespace dtrain::parallel::pipeline
