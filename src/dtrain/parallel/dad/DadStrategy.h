// The `dad` and `rankdad` strategies (the dAD paper, arXiv 2102.09631): every rank holds the whole
// model, and for each Linear layer the ranks share what its weight gradient Δᵀ X is made of
// instead of the gradient: the rows of X and Δ (dAD, exact), or a rank-r factorisation of this
// rank's Δᵀ X (rank-dAD). Every other parameter (convolutions, norms, embeddings, and rank-dAD's
// biases) goes through data_parallel's gradient buckets, overlapped with backward. With
// parallel.dad.auto each layer sends whichever of these is cheapest (LayerPlan.h).
#pragma once

#include <ATen/core/Generator.h>

#include <memory>
#include <vector>

#include "dtrain/parallel/ReplicaStrategy.h"
#include "dtrain/parallel/dad/DadExchange.h"
#include "dtrain/parallel/dad/DadOptions.h"
#include "dtrain/parallel/dad/LayerPlan.h"
#include "dtrain/parallel/dad/LinearTaps.h"
#include "dtrain/parallel/data_parallel/DataParallel.h"

namespace dtrain::parallel {

class DadStrategy final : public ReplicaStrategy {
 public:
  enum class Mode { Dad, RankDad };

  // Collective: checks the ranks' models agree and broadcasts rank 0's weights.
  DadStrategy(StrategyContext context, Mode mode);

  std::string name() const override { return mode_ == Mode::Dad ? "dad" : "rankdad"; }
  StepResult train_step(const data::Batch& batch) override;
  // dad/layers_<method>: Linear layers per method; dad/mean_rank: rank-dAD's agreed rank in the
  // last step, averaged over its layers.
  std::map<std::string, double> metrics() override;
  // dad/<layer>: the method chosen for each Linear layer, with the bytes it was expected to cost.
  std::map<std::string, std::string> notes() const override { return notes_; }

  const std::vector<LayerMethod>& methods() const { return methods_; }

 private:
  // On the first step, after its first forward: each layer's method, agreed by every rank (with
  // auto, the plans to try; Note [Measuring auto's plans]).
  void plan(int accumulation_steps);
  void build_reducer();
  // After a step of auto's trial: the next plan, or the one kept.
  void advance_trial(double step_seconds);
  void use(const PlanTrial::Plan& methods);
  // Taps only the layers whose X and Δ the current plan gathers.
  void record_what_is_gathered();
  void note_methods();
  std::vector<ExchangeLayer> exchange_layers();

  Mode mode_;
  DadOptions options_;
  LinearTaps taps_;
  std::vector<LayerMethod> methods_;  // per tapped layer, once planned
  std::vector<LayerShape> shapes_;    // per tapped layer, rows agreed over ranks
  std::unique_ptr<PlanTrial> trial_;
  std::unique_ptr<DataParallel> dp_;
  at::Generator generator_;
  ExchangeTiming last_exchange_;
  std::map<std::string, std::string> notes_;
};

}  // namespace dtrain::parallel
