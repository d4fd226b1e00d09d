// `dtrain train` with parallel.strategy decentralized through the real binary: graph nodes with
// their own data on one worker or spread over two give the same numbers, a run saved by two
// workers continues on one, metrics.jsonl carries every node and the consensus error, push-sum on
// a one-peer exponential graph, hierarchical dsgd over two hosts and adapt-with-combine dsgd train
// on Fashion-MNIST, bad graph and asynchronous-gossip settings are refused by name, asynchronous dsgd
// keeps training on three workers while the fourth is stopped with SIGSTOP, then ends cleanly when it
// continues, and a worker of it that dies ends the job naming its rank.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "cli/CliTestUtil.h"
#include "support/Files.h"
#include "support/ScratchDir.h"

namespace {

namespace fs = std::filesystem;
using dtrain::testing::last_json_line;
using dtrain::testing::read_file;
using dtrain::testing::run;
using dtrain::testing::spawn;

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
      {"parallel.graph.type=edges 'parallel.graph.edges=0->1,1->2,2->3,3->0,0-2'",
       "parallel.graph.edges: row 0 of the edges graph's mixing matrix"},
      {"parallel.graph.type=edges 'parallel.graph.edges=0->1,1->5'",
       "parallel.graph.edges: arc 1->5 must join two different nodes in 0..3"},
      {"parallel.graph.type=edges 'parallel.graph.edges=0->1,1->2,2->3,3->0' "
       "parallel.decentralized.algorithm=cadmm",
       "parallel.graph.edges: '0->1,1->2,2->3,3->0' holds arcs a->b, so the graph is directed, but cadmm"},
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

// Asynchronous gossip's keys and bad values, refused by name in one line before a run starts.
TEST_F(DecentralizedCommand, AsynchronousGossipKeysAndBadValuesAreRefusedByNameBeforeARunStarts) {
  std::ofstream(dir_ / "dsgd.yaml")
      << "name: gossip\nout_dir: " << (dir_ / "runs").string() << "\n"
      << "data: {dataset: synthetic, synthetic_shape: [1, 8, 8], synthetic_classes: 4, synthetic_size: 512}\n"
         "model: {name: mlp, hidden: [16]}\n"
         "parallel: {strategy: decentralized, graph: {type: cycle, nodes: 4}}\n"
         "train: {max_steps: 2}\n";
  const std::string on = "parallel.decentralized.asynchronous=true ";
  const std::vector<std::pair<std::string, std::string>> cases{
      {"parallel.decentralized.asynchronous=maybe", "parallel.decentralized.asynchronous"},
      {on + "parallel.decentralized.staleness=-1",
       "parallel.decentralized.staleness: expected an integer >= 0"},
      {on + "parallel.decentralized.staleness=x", "parallel.decentralized.staleness"},
      {"parallel.decentralized.staleness=3",
       "parallel.decentralized.staleness: a setting of asynchronous gossip"},
      {on + "parallel.decentralized.algorithm=cadmm",
       "parallel.decentralized.asynchronous: algorithm cadmm cannot gossip asynchronously"},
      {on + "parallel.decentralized.algorithm=push_sum",
       "parallel.decentralized.asynchronous: algorithm push_sum cannot gossip asynchronously"},
      {on + "parallel.decentralized.hierarchical=true parallel.decentralized.ranks_per_host=1",
       "parallel.decentralized.asynchronous: hierarchical gossip"},
      {on + "parallel.graph.type=random parallel.graph.redraw_every=2",
       "parallel.decentralized.asynchronous: keeps each neighbour's newest state, so it needs a fixed graph"},
      {"parallel.decentralized.delay_ms=-1", "parallel.decentralized.delay_ms: expected"},
      {"parallel.decentralized.delay_ms=5", "parallel.decentralized.delay_ms: set, but no delay_rank"},
      {"parallel.decentralized.delay_rank=1", "parallel.decentralized.delay_rank: names a straggler"},
      {"parallel.decentralized.delay_rank=-2",
       "parallel.decentralized.delay_rank: expected an integer >= -1"},
      {"parallel.decentralized.delay_rank=2 parallel.decentralized.delay_ms=5",
       "parallel.decentralized.delay_rank: 2 is not a rank of this run of 2 ranks"},
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

// Every process below `root`, by pid, with its parent.
std::map<pid_t, pid_t> processes_below(pid_t root) {
  std::map<pid_t, pid_t> parent;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const auto name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string line;
    if (!std::getline(stat, line) || line.rfind(')') == std::string::npos) continue;
    std::istringstream rest(line.substr(line.rfind(')') + 2));
    char state = 0;
    pid_t up = 0;
    rest >> state >> up;
    parent[std::stoi(name)] = up;
  }
  std::map<pid_t, pid_t> below;
  for (const auto& [pid, up] : parent) {
    pid_t p = up;
    while (p > 1 && p != root) p = parent.count(p) ? parent[p] : 0;
    if (p == root) below[pid] = up;
  }
  return below;
}

// The worker process of `rank` below `root`: its environment says RANK (dtrain launch) or
// OMPI_COMM_WORLD_RANK (mpirun, which `--nproc` uses where Open MPI is installed); -1 if none.
pid_t worker_of(pid_t root, int rank) {
  for (const auto& [pid, up] : processes_below(root)) {
    std::ifstream env("/proc/" + std::to_string(pid) + "/environ");
    for (std::string entry; std::getline(env, entry, '\0');) {
      if (entry == "RANK=" + std::to_string(rank) || entry == "OMPI_COMM_WORLD_RANK=" + std::to_string(rank))
        return pid;
    }
  }
  return -1;
}

// A job the test started: on a failed assertion, continued and killed with its workers.
struct JobGuard {
  pid_t job = -1;
  ~JobGuard() {
    if (job <= 0 || ::waitpid(job, nullptr, WNOHANG) != 0) return;
    for (const auto& [pid, up] : processes_below(job)) {
      ::kill(pid, SIGCONT);
      ::kill(pid, SIGKILL);
    }
    ::kill(job, SIGKILL);
    ::waitpid(job, nullptr, 0);
  }
};

char state_of(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line) || line.rfind(')') == std::string::npos) return 0;
  return line[line.rfind(')') + 2];
}

// Rank 0's own log (site_0/log.txt of the run under `dir`/runs), written and flushed line by line
// by the worker itself: its lines are not held back by a launcher forwarding output.
std::string rank0_log(const fs::path& dir) {
  if (!fs::exists(dir / "runs")) return "";
  for (const auto& run : fs::directory_iterator(dir / "runs")) {
    if (fs::exists(run.path() / "site_0" / "log.txt")) return read_file(run.path() / "site_0" / "log.txt");
  }
  return "";
}

// The last step rank 0 has logged in `log` (0 before the first).
long last_step(const std::string& log) {
  static const std::regex step_line("step (\\d+)/");
  long step = 0;
  for (std::sregex_iterator it(log.begin(), log.end(), step_line), end; it != end; ++it)
    step = std::max(step, std::stol((*it)[1].str()));
  return step;
}

// Asynchronous dsgd (staleness 2) on a cycle of four mlp nodes of Fashion-MNIST, 16384 images
// (256 steps an epoch), logging every 80 steps: `dir`/async.yaml.
void write_async_config(const fs::path& dir, int epochs, int max_steps) {
  std::ofstream(dir / "async.yaml")
      << "name: async\nout_dir: " << (dir / "runs").string() << "\n"
      << "data: {dataset: fashion-mnist, subset_size: 16384, test_subset_size: 500, batch_size: 16, "
         "partition: random}\n"
         "model: {name: mlp, hidden: [32]}\n"
         "optim: {name: sgd, lr: 0.05}\n"
         "parallel:\n"
         "  strategy: decentralized\n"
         "  timeout_s: 60\n"
         "  decentralized: {algorithm: dsgd, asynchronous: true, staleness: 2}\n"
         "  graph: {type: cycle, nodes: 4}\n"
         "train: {epochs: "
      << epochs << ", max_steps: " << max_steps
      << ", eval_every_steps: 0, eval_every_epochs: 0, eval_at_start: false,\n"
         "        checkpoint_every_epochs: 0, log_every_steps: 80, seed: 3, threads: 1}\n";
}

// Asynchronous dsgd on four workers, a node each on a cycle, Fashion-MNIST. Rank 3 is stopped with
// SIGSTOP as soon as rank 0 reports the run's set-up, and stays stopped until rank 0 has logged
// step 80: the others train on without it (up to step 80, where the workers agree on an
// interrupt, train.log_every_steps). Then it continues; the run ends with exit 0, its figures say
// the stopped node was left out of many rounds, and the nodes agree within docs/decentralized.md's
// bound on the consensus error.
TEST_F(DecentralizedCommand, AsynchronousDsgdTrainsOnWhileAWorkerIsStoppedAndEndsCleanly) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  // 16384 images over four nodes: 256 steps an epoch, so that no epoch's end (a collective)
  // falls inside the 160 steps.
  write_async_config(dir_.path(), 1, 160);
  using Clock = std::chrono::steady_clock;
  const auto out = dir_ / "job.out", err = dir_ / "job.err";
  const pid_t job = spawn({DTRAIN_BINARY, "train", (dir_ / "async.yaml").string(), "--nproc", "4"}, out, err);
  ASSERT_GT(job, 0);
  JobGuard guard{job};
  const auto wait_for_step = [&](long step) {
    const auto deadline = Clock::now() + std::chrono::seconds(120);
    while (last_step(rank0_log(dir_.path())) < step && Clock::now() < deadline) {
      if (state_of(job) == 'Z') return false;                     // ended early
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a poll interval, not a synchronisation
    }
    return last_step(rank0_log(dir_.path())) >= step;
  };
  // The last line before the first step; the others then need nothing from rank 3 until step 80.
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  while (rank0_log(dir_.path()).find("decentralized_parameters_per_node") == std::string::npos &&
         Clock::now() < deadline && state_of(job) != 'Z') {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // a poll interval, not a synchronisation
  }
  const pid_t victim = worker_of(job, 3);
  ASSERT_GT(victim, 0) << read_file(err);
  ASSERT_EQ(::kill(victim, SIGSTOP), 0);
  while (state_of(victim) != 'T') std::this_thread::yield();
  const long stopped_at = last_step(rank0_log(dir_.path()));
  const bool advanced = wait_for_step(80);
  const char still = state_of(victim);
  ::kill(victim, SIGCONT);
  EXPECT_EQ(stopped_at, 0) << "rank 0 logged a step before rank 3 was stopped";
  ASSERT_TRUE(advanced) << "rank 0 stalled at step " << last_step(rank0_log(dir_.path()))
                        << " while rank 3 was stopped";
  EXPECT_EQ(still, 'T') << "rank 3 must stay stopped while the others advance";
  int status = 0;
  ASSERT_EQ(::waitpid(job, &status, 0), job);
  guard.job = -1;
  ASSERT_TRUE(WIFEXITED(status)) << read_file(err);
  ASSERT_EQ(WEXITSTATUS(status), 0) << read_file(err);
  const auto result = last_json_line(read_file(out));
  const auto& metrics = result["strategy_metrics"];
  // Ranks 0 and 2 left rank 3's node out of at least ten rounds each while it was stopped.
  EXPECT_GE(metrics["stale_neighbours_skipped"].get<double>(), 20.0);
  EXPECT_LE(metrics["staleness_max"].get<double>(), 2.0);
  EXPECT_LT(metrics["consensus_error"].get<double>(), 0.15);  // docs/decentralized.md's bound
  std::cout << "consensus error " << metrics["consensus_error"] << ", staleness mean "
            << metrics["staleness_mean"] << " max " << metrics["staleness_max"] << ", neighbours skipped "
            << metrics["stale_neighbours_skipped"] << ", top-1 " << result["final"]["top1"] << "\n";
}

// A worker of an asynchronous run that really dies (SIGKILL) ends the job with the launcher's usual
// line naming its rank, as in every strategy.
TEST_F(DecentralizedCommand, AsynchronousDsgdEndsNamingAWorkerThatDies) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  write_async_config(dir_.path(), 100, 25600);
  const auto out = dir_ / "job.out", err = dir_ / "job.err";
  const pid_t job = spawn({DTRAIN_BINARY, "train", (dir_ / "async.yaml").string(), "--nproc", "4"}, out, err);
  ASSERT_GT(job, 0);
  JobGuard guard{job};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (last_step(rank0_log(dir_.path())) < 80 && std::chrono::steady_clock::now() < deadline &&
         state_of(job) != 'Z')
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a poll interval, not a synchronisation
  const pid_t victim = worker_of(job, 3);
  ASSERT_GT(victim, 0) << read_file(err);
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(job, &status, 0), job);
  guard.job = -1;
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_NE(WEXITSTATUS(status), 0);
  const auto text = read_file(err);
  EXPECT_NE(text.find("rank 3 on"), std::string::npos) << text;
  EXPECT_NE(text.find("failed with exit code 137"), std::string::npos) << text;
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
