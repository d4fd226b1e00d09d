// Cutting a models::Network's sequence of layers into contiguous pipeline stages: balanced by
// parameter count, by measured forward+backward time per layer, or at given cut points. The
// result is the first layer of every stage; every rank must compute the same one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/models/Network.h"

namespace dtrain::parallel::pipeline {

// first[s] is the index of stage s's first layer, first[S] the number of layers; stage s runs
// layers [first[s], first[s+1]).
using StageBounds = std::vector<int>;

// Note [Balancing stages]
// A step of a pipeline takes as long as its slowest stage, so the cut minimises the largest
// stage's weight (the linear-partition problem), exactly, by dynamic programming over (stage,
// layer) in O(S L^2). Among the cuts with that bottleneck it takes the one whose largest stage
// has the fewest layers (so layers without parameters, ReLU or Flatten, spread out instead of
// piling up at one end), and then the earliest cuts. DeepSpeed's partition_balanced searches the
// bottleneck by bisection and torchgpipe's balance_by_time/balance_by_size use a block-partition
// heuristic; this exact version is cheap for the tens of layers dtrain's models have.
StageBounds balanced_bounds(const std::vector<double>& weights, int stages);

// Stages starting at `cut_points` (the first layer of stages 1..S-1, strictly increasing, each in
// [1, layers-1]). Throws std::invalid_argument naming parallel.pipeline.cut_points otherwise.
StageBounds bounds_from_cut_points(const std::vector<int>& cut_points, int layers, int stages);

// The parameters of each layer (elements), in layer order.
std::vector<double> layer_parameter_counts(const models::Network& network);

// Seconds of one forward plus backward pass of each layer on a batch of `samples` samples of
// `input` (median of `repeats` after one warm-up), measured one layer at a time on its own
// input. Runs the network in eval mode (no dropout draws, no BatchNorm statistics updated) and
// takes gradients with autograd::grad, so parameters' .grad and the random generator are left
// as they were; the inputs are a deterministic ramp, not random draws.
std::vector<double> measure_layer_seconds(models::Network& network, const models::InputSpec& input,
                                          std::int64_t samples = 16, int repeats = 3);

// "stage 0: layers 0-1 (25,120 parameters); stage 1: layers 2-3 (330 parameters)"
std::string describe_bounds(const StageBounds& bounds, const std::vector<double>& parameter_counts);

}  // namespace dtrain::parallel::pipeline
