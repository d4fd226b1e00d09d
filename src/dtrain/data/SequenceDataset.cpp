// The in-memory sequence classification set; see SequenceDataset.h.
#include "dtrain/data/SequenceDataset.h"

namespace dtrain::data {

SequenceDataset::SequenceDataset(std::string name, torch::Tensor ids, torch::Tensor labels,
                                 std::int64_t vocab_size, std::int64_t num_classes)
    : name_(std::move(name)),
      ids_(ids.contiguous()),
      labels_(labels.contiguous()),
      vocab_size_(vocab_size),
      num_classes_(num_classes) {
  TORCH_INTERNAL_ASSERT(ids_.dim() == 2 && ids_.scalar_type() == torch::kLong);
  TORCH_INTERNAL_ASSERT(labels_.dim() == 1 && labels_.size(0) == ids_.size(0));
}

Batch SequenceDataset::get_batch(const torch::Tensor& indices, std::uint64_t /*augment_seed*/) const {
  const auto rows = indices.to(torch::kLong);
  return Batch{ids_.index_select(0, rows), labels_.index_select(0, rows)};
}

}  // namespace dtrain::data
