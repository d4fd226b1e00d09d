// `dtrain train` with parallel.strategy decentralized through the real binary: graph nodes with
// their own data on one worker or spread over two give the same numbers, a run saved by two
// workers continues on one, metrics.jsonl carries every node and the consensus error, push-sum on
// a one-peer exponential graph, hierarchical dsgd over two hosts and adapt-with-combine dsgd train
// on Fashion-MNIST, and bad graph settings are refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/CliTestUtil.h"
#include "support/ScratchDir.h"

namespace {

namespace fs = std::filesystem;
using dtrain::testing::last_json_line;
using dtrain::testing::run;

class DecentralizedCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream(dir_ / "cadmm.yaml")
        << "name: nodes\nout_dir: " << (dir_ / "runs").string() << "\n"
        << "data: {dataset: synthetic, synthetic_shape: [1, 8, 8], synthetic_classes: 4, synthetic_size: "
           "512,\n"
           "       batch_size: 8, test_subset_size: 64, partition: hetero, classes_per_rank: 0}\n"
           "model: {name: mlp, hidden: [16]}\n"
           "optim: {name: adam, lr: 0.01}\n"
           "parallel:\n"
           "  strategy: decentralized\n"
           "  timeout_s: 60\n"
           "  decentralized: {algorithm: cadmm, rho_init: 0.5, primal_iterations: 2, "
           "persistent_primal_optimizer: true}\n"
           "  graph: {type: cycle, nodes: 4}\n"
           "train: {epochs: 1000, max_steps: 12, eval_every_steps: 6, eval_every_epochs: 0, eval_at_start: "
           "true,\n"
           "        checkpoint_every_steps: 6, log_every_steps: 6, seed: 5}\n";
  }

  nlohmann::json train(const std::string& args) {
    const auto out = run("train " + (dir_ / "cadmm.yaml").string() + " " + args, dir_.path());
    EXPECT_EQ(out.exit_code, 0) << out.err;
    return last_json_line(out.out);
  }

  dtrain::testing::ScratchDir dir_;
};

TEST_F(DecentralizedCommand, NodesOnOneOrTwoWorkersGiveTheSameNumbersAndMetricsCarryEveryNode) {
  const auto one = train("--nproc 1");
  const auto two = train("--nproc 2");
  EXPECT_EQ(one["world_size"], 1);
  EXPECT_EQ(two["world_size"], 2);
  EXPECT_EQ(one["data_partition_hash"], two["data_partition_hash"]);
  for (int i = 0; i < 4; ++i) {
    const auto node = "node" + std::to_string(i);
    EXPECT_NEAR(one["final_by_model"][node]["loss"].get<double>(),
                two["final_by_model"][node]["loss"].get<double>(), 1e-5)
        << node;
  }
  EXPECT_NEAR(one["strategy_metrics"]["consensus_error"].get<double>(),
              two["strategy_metrics"]["consensus_error"].get<double>(), 1e-6);
  EXPECT_EQ(one["strategy_metrics"]["forward_pass_count"], 12 * 2 * 8);  // rounds x primal steps x batch
  // metrics.jsonl: an evaluation before the first round, and each node, pair and byte count.
  std::ifstream lines(fs::path(two["run_dir"].get<std::string>()) / "metrics.jsonl");
  std::string line;
  std::vector<nlohmann::json> evals;
  while (std::getline(lines, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("val/node3/top1")) evals.push_back(j);
  }
  ASSERT_EQ(evals.size(), 3u);
  EXPECT_EQ(evals.front()["step"], 0);
  EXPECT_EQ(evals.front()["strategy/consensus_error"], 0.0);
  EXPECT_GT(evals.back()["strategy/consensus_error"].get<double>(), 0.0);
  EXPECT_TRUE(evals.back().contains("strategy/distance/0/3"));
  EXPECT_GT(evals.back()["strategy/node_bytes_sent"].get<double>(),
            evals[1]["strategy/node_bytes_sent"].get<double>());
}

TEST_F(DecentralizedCommand, ARunSavedByTwoWorkersContinuesOnOne) {
  const auto straight = train("--nproc 1");
  const auto first = train("--nproc 2 train.max_steps=6");
  const auto resumed = train("--nproc 1 --resume " + first["run_dir"].get<std::string>());
  EXPECT_EQ(resumed["steps"], 12);
  for (int i = 0; i < 4; ++i) {
    const auto node = "node" + std::to_string(i);
    EXPECT_NEAR(resumed["final_by_model"][node]["loss"].get<double>(),
                straight["final_by_model"][node]["loss"].get<double>(), 1e-5)
        << node;
  }
}

TEST_F(DecentralizedCommand, NodesThatDoNotSplitOverTheWorkersAreRefusedBeforeAnyStarts) {
  const auto out = run("train " + (dir_ / "cadmm.yaml").string() + " --nproc 3", dir_.path());
  EXPECT_NE(out.exit_code, 0);
  EXPECT_NE(out.err.find("parallel.graph.nodes: 4 nodes do not split evenly over 3 ranks"), std::string::npos)
      << out.err;
  EXPECT_FALSE(fs::exists(dir_ / "runs")) << "no run folder for a run that never starts";
  const auto other =
      run("train " + (dir_ / "cadmm.yaml").string() + " parallel.decentralized.local_steps=4", dir_.path());
  EXPECT_NE(other.exit_code, 0);
  EXPECT_NE(other.err.find("parallel.decentralized.local_steps: a setting of algorithm local_sgd"),
            std::string::npos)
      << other.err;
}

// A Fashion-MNIST run of eight mlp nodes, 60 rounds of batch 16, with `decentralized` and `graph`
// as parallel's sections, on `nproc` workers; its result and its three evaluations (at the start,
// after 30 and 60 rounds).
struct FashionRun {
  nlohmann::json result;
  std::vector<nlohmann::json> evals;
};

FashionRun train_fashion(const fs::path& dir, const std::string& decentralized, const std::string& graph,
                         int nproc) {
  std::ofstream(dir / "fashion.yaml")
      << "name: fashion\nout_dir: " << (dir / "runs").string() << "\n"
      << "data: {dataset: fashion-mnist, subset_size: 4096, test_subset_size: 500, batch_size: 16, "
         "partition: random}\n"
         "model: {name: mlp, hidden: [32]}\n"
         "optim: {name: sgd, lr: 0.05}\n"
         "parallel:\n"
         "  strategy: decentralized\n"
         "  timeout_s: 60\n"
         "  decentralized: "
      << decentralized << "\n  graph: " << graph
      << "\n"
         "train: {epochs: 1000, max_steps: 60, eval_every_steps: 30, eval_every_epochs: 0, eval_at_start: "
         "true,\n"
         "        checkpoint_every_epochs: 0, log_every_steps: 30, seed: 3, threads: 1}\n";
  const auto out = run("train " + (dir / "fashion.yaml").string() + " --nproc " + std::to_string(nproc), dir);
  EXPECT_EQ(out.exit_code, 0) << out.err;
  FashionRun r;
  if (out.exit_code != 0) return r;
  r.result = last_json_line(out.out);
  std::ifstream lines(fs::path(r.result["run_dir"].get<std::string>()) / "metrics.jsonl");
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("val/loss")) r.evals.push_back(j);
  }
  return r;
}

// Push-sum on the one-peer exponential graph, eight nodes on two workers, on Fashion-MNIST: the
// node average learns, and the nodes stay close, far closer than nodes that never talk (measured:
// loss 2.31 -> 0.72, top-1 0.76, consensus error 0.028 against 0.25 without communication).
TEST_F(DecentralizedCommand, PushSumOnAOnePeerExponentialGraphTrainsAndAgrees) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  const std::string graph = "{type: one_peer_exponential, nodes: 8}";
  const auto pushed = train_fashion(dir_.path(), "{algorithm: push_sum}", graph, 2);
  EXPECT_EQ(pushed.result["strategy_notes"]["decentralized_algorithm"], "push_sum");
  const auto& evals = pushed.evals;
  ASSERT_EQ(evals.size(), 3u);
  EXPECT_LT(evals.back()["val/loss"].get<double>(), 0.5 * evals.front()["val/loss"].get<double>());
  EXPECT_GT(evals.back()["val/top1"].get<double>(), 0.6);
  const double agreed = evals.back()["strategy/consensus_error"].get<double>();
  const auto alone = train_fashion(dir_.path(), "{algorithm: individual}", graph, 2);
  ASSERT_FALSE(alone.result.is_null());
  const double apart = alone.result["strategy_metrics"]["consensus_error"].get<double>();
  EXPECT_GT(agreed, 0.0);
  EXPECT_LT(agreed, 0.25 * apart) << "push-sum " << agreed << ", no communication " << apart;
}

// Hierarchical dsgd through real worker processes: four workers in two hosts of two, each host
// averaging its four nodes over its own communicator, the two hosts' leaders gossiping.
TEST_F(DecentralizedCommand, HierarchicalDsgdInTwoHostsOfTwoWorkersTrains) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  const auto r = train_fashion(dir_.path(), "{algorithm: dsgd, hierarchical: true, ranks_per_host: 2}",
                               "{type: complete, nodes: 8}", 4);
  EXPECT_EQ(r.result["strategy_notes"]["decentralized_hosts"], "2 hosts of 2 ranks");
  ASSERT_EQ(r.evals.size(), 3u);
  EXPECT_LT(r.evals.back()["val/loss"].get<double>(), 0.5 * r.evals.front()["val/loss"].get<double>());
  EXPECT_GT(r.evals.back()["val/top1"].get<double>(), 0.6);
  std::cout << "hierarchical dsgd: val/loss " << r.evals.front()["val/loss"] << " to "
            << r.evals.back()["val/loss"] << ", top-1 " << r.evals.back()["val/top1"] << ", consensus error "
            << r.evals.back()["strategy/consensus_error"] << "\n";
}

// Adapt-with-combine dsgd on a cycle of eight nodes over two workers: it trains, and reports how
// much of its exchange overlapped the gradients.
TEST_F(DecentralizedCommand, AdaptWithCombineDsgdTrainsAndReportsItsOverlap) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  const auto r =
      train_fashion(dir_.path(), "{algorithm: dsgd, adapt_with_combine: true}", "{type: cycle, nodes: 8}", 2);
  ASSERT_EQ(r.evals.size(), 3u);
  EXPECT_LT(r.evals.back()["val/loss"].get<double>(), 0.5 * r.evals.front()["val/loss"].get<double>());
  EXPECT_GT(r.evals.back()["val/top1"].get<double>(), 0.6);
  const double overlap = r.result["strategy_metrics"]["exchange_overlap_all_rounds"].get<double>();
  EXPECT_GT(overlap, 0.0);
  EXPECT_LE(overlap, 1.0);
  std::cout << "adapt-with-combine: val/loss " << r.evals.back()["val/loss"] << ", top-1 "
            << r.evals.back()["val/top1"] << ", exchange overlap " << overlap << "\n";
}

// Every new graph key and a bad value of each, refused by name in one line before a run starts.
TEST_F(DecentralizedCommand, GraphKeysAndBadValuesAreRefusedByNameBeforeARunStarts) {
  std::ofstream(dir_ / "dsgd.yaml")
      << "name: gossip\nout_dir: " << (dir_ / "runs").string() << "\n"
      << "data: {dataset: synthetic, synthetic_shape: [1, 8, 8], synthetic_classes: 4, synthetic_size: 512}\n"
         "model: {name: mlp, hidden: [16]}\n"
         "parallel: {strategy: decentralized, graph: {type: cycle, nodes: 4}}\n"
         "train: {max_steps: 2}\n";
  const std::vector<std::pair<std::string, std::string>> cases{
      {"parallel.graph.type=one_peer_exponential parallel.graph.nodes=6",
       "parallel.graph.type: one_peer_exponential averages exactly only over a power-of-two node count"},
      {"parallel.graph.base=3", "parallel.graph.base: a setting of graph type exponential"},
      {"parallel.graph.type=exponential parallel.graph.base=1",
       "parallel.graph.base: expected an integer >= 2"},
      {"parallel.graph.schedule=[exponential]", "parallel.graph.schedule: a setting of graph type schedule"},
      {"parallel.graph.type=schedule parallel.graph.schedule=[exponential,hypercube]",
       "parallel.graph.schedule: expected graph types among"},
      {"parallel.graph.weights=0-1:x", "parallel.graph.weights: '0-1:x' is not a weight"},
      {"parallel.graph.weights=0-1:0.5 parallel.decentralized.algorithm=local_sgd",
       "parallel.graph.weights: local_sgd does not mix with graph weights"},
      {"parallel.graph.type=exponential parallel.decentralized.algorithm=cadmm",
       "parallel.graph.type: exponential is directed, but cadmm"},
      {"parallel.graph.type=directed_cycle parallel.graph.weights=0-1:0.1",
       "parallel.graph.weights: row 0 of the directed_cycle graph's mixing matrix"},
      {"parallel.decentralized.algorithm=push_sum parallel.graph.type=directed_cycle "
       "parallel.graph.weights=0-0:0.5,0-1:0.1",
       "parallel.graph.weights: column 0 of the directed_cycle graph's mixing matrix"},
      {"parallel.graph.peers=2", "parallel.graph.peers: a setting of graph type base"},
      {"parallel.graph.type=base parallel.graph.peers=0",
       "parallel.graph.peers: expected a positive integer"},
      {"parallel.decentralized.algorithm=pushsum", "parallel.decentralized.algorithm"},
      {"parallel.decentralized.hierarchical=true parallel.decentralized.ranks_per_host=3",
       "parallel.decentralized.ranks_per_host: 3 ranks per host do not divide the 2 ranks"},
      {"parallel.decentralized.hierarchical=true parallel.decentralized.algorithm=choco",
       "parallel.decentralized.hierarchical: algorithm choco cannot gossip between hosts"},
  };
  for (const auto& [overrides, expected] : cases) {
    const auto out = run("train " + (dir_ / "dsgd.yaml").string() + " --nproc 2 " + overrides, dir_.path());
    EXPECT_NE(out.exit_code, 0) << overrides;
    EXPECT_NE(out.err.find(expected), std::string::npos) << overrides << ": " << out.err;
    const auto error = out.err.find("error: ");
    ASSERT_NE(error, std::string::npos) << out.err;
    EXPECT_EQ(out.err.find('\n', error), out.err.size() - 1) << "one line: " << out.err;
    EXPECT_FALSE(fs::exists(dir_ / "runs")) << overrides << ": no run folder for a run that never starts";
  }
}

}  // namespace

namespace {

// DiNNO's README template, as written there (tests/experiment/data/dinno_template.yaml); its
// data_dir "../data/" is given MNIST's file names over Debian's Fashion-MNIST, the same IDX format:
// dtrain downloads nothing.
const fs::path kDinnoTemplate = fs::path(DTRAIN_EXPERIMENT_TEST_DATA) / "dinno_template.yaml";

TEST_F(DecentralizedCommand, DinnoTemplateRunsAsWrittenOnFiveWorkers) {
  const fs::path fashion = "/usr/share/datasets/fashion-mnist";
  fs::create_directories(dir_ / "data");
  fs::create_directories(dir_ / "experiments");
  for (const char* file : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                           "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}) {
    fs::create_symlink(fashion / file, dir_ / "data" / file);
  }
  fs::copy_file(kDinnoTemplate, dir_ / "experiments" / "template.yaml");
  const auto cwd = fs::current_path();
  fs::current_path(dir_ / "experiments");  // the authors run it from experiments/
  const auto out =
      run("experiment template.yaml --nproc 5 --set data.subset_size=6000 --set data.test_subset_size=500",
          dir_.path());
  fs::current_path(cwd);
  ASSERT_EQ(out.exit_code, 0) << out.err;
  std::vector<fs::path> made;
  for (const auto& entry : fs::directory_iterator(dir_ / "experiments" / "outputs"))
    made.push_back(entry.path());
  ASSERT_EQ(made.size(), 1u);
  EXPECT_NE(made[0].filename().string().find("_dist_cnn_cadmm_scaled_v_const"), std::string::npos);
  EXPECT_TRUE(fs::exists(made[0] / "experiment.yaml"));
  std::ifstream in(made[0] / "vanilla_cadmm_results.json");
  ASSERT_TRUE(in) << "no vanilla_cadmm_results.json in " << made[0];
  const auto results = nlohmann::json::parse(in);
  EXPECT_EQ(results["rounds"], nlohmann::json::parse("[0, 20, 30]"));
  ASSERT_EQ(results["top1_accuracy"].size(), 3u);
  EXPECT_EQ(results["top1_accuracy"][2].size(), 5u);
  EXPECT_EQ(results["consensus_error"][2]["distances"].size(), 5u);
  EXPECT_EQ(results["forward_pass_count"][2], 30 * 5 * 64);
  EXPECT_GT(results["bytes"][2].get<double>(), results["bytes"][1].get<double>());
  EXPECT_GT(results["top1_accuracy"][2][0].get<double>(), 0.15);
}

}  // namespace
