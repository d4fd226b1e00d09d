// `dtrain bench throughput`: option checks (each error names its flag), the sweep's order and
// configurations (also as the runs of the experiment that carries it out), combining the ranks'
// reports (the slowest rank per step), the JSON line and the tables; and a tiny real sweep through
// the binary whose memory figures are ZeRO's accounting.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "cli/CliTestUtil.h"
#include "data/DataTestUtil.h"
#include "dtrain/cli/BenchThroughput.h"
#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/parallel/Registry.h"
#include "dtrain/parallel/data_parallel/DataParallel.h"

namespace dtrain::cli {
namespace {

// The message of the std::invalid_argument that expand_points throws for `o`, or "" when it
// throws none.
std::string refusal(const BenchThroughputOptions& o) {
  try {
    expand_points(o);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

BenchThroughputOptions tiny() {
  BenchThroughputOptions o;
  o.models = "mlp";
  o.batches = "8";
  o.workers = "1";
  o.strategies = "local";
  o.steps = 2;
  o.warmup = 1;
  return o;
}

TEST(BenchThroughput, ListsAreCheckedItemByItem) {
  EXPECT_EQ(parse_name_list("--models", "a,bb"), (std::vector<std::string>{"a", "bb"}));
  EXPECT_EQ(parse_count_list("--batches", "32,64"), (std::vector<int>{32, 64}));
  for (const std::string bad : {"", "1,,2", "0", "-1", "two", "1.5", "99999999999", "1, 2"}) {
    try {
      parse_count_list("--batches", bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()).rfind("--batches: ", 0), 0u) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
}

TEST(BenchThroughput, EachBadOptionIsRefusedNamingItsFlag) {
  EXPECT_EQ(refusal(tiny()), "");
  auto with = [](auto change) {
    auto o = tiny();
    change(o);
    return refusal(o);
  };
  const auto unknown_model = with([](auto& o) { o.models = "mlp,resnet9000"; });
  EXPECT_NE(unknown_model.find("--models: unknown model 'resnet9000'"), std::string::npos) << unknown_model;
  EXPECT_NE(unknown_model.find("resnet18"), std::string::npos) << unknown_model;
  EXPECT_NE(with([](auto& o) { o.batches = "8,0"; }).find("--batches: '0'"), std::string::npos);
  EXPECT_NE(with([](auto& o) { o.workers = "x"; }).find("--workers: 'x'"), std::string::npos);
  EXPECT_NE(with([](auto& o) { o.precisions = "fp8"; }).find("--precisions: 'fp8'"), std::string::npos);
  EXPECT_NE(with([](auto& o) { o.steps = 0; }).find("--steps must be at least 1"), std::string::npos);
  EXPECT_NE(with([](auto& o) { o.warmup = -1; }).find("--warmup must be at least 0"), std::string::npos);
  EXPECT_NE(with([](auto& o) { o.set = {"model.name=lenet5"}; }).find("use --models instead"),
            std::string::npos);
  EXPECT_NE(with([](auto& o) { o.set = {"train.max_steps=3"}; }).find("use --steps and --warmup"),
            std::string::npos);
  EXPECT_NE(with([](auto& o) { o.set = {"train={epochs: 2}"}; }).find("the sweep sets train.precision"),
            std::string::npos);
  EXPECT_NE(with([](auto& o) { o.set = {"optim.lr=fast"}; }).find("optim.lr"), std::string::npos);
  EXPECT_NE(with([](auto& o) { o.set = {"optim.lr"}; }), "");
  // A strategy section no swept strategy reads would be accepted and ignored: refused.
  const auto unread = with([](auto& o) { o.set = {"parallel.data_parallel.compression=fp16"}; });
  EXPECT_NE(unread.find("no strategy in --strategies (local) reads parallel.data_parallel.*"),
            std::string::npos)
      << unread;
}

// Unknown strategies are refused with the registry's names: whatever is registered, none hard-coded.
// --set's model keys reach the points whose model reads them; one that no point's model reads is
// refused naming the key.
TEST(BenchThroughput, ModelKeysOfSetApplyToThePointsWhoseModelReadsThem) {
  auto o = tiny();
  o.models = "mlp,lenet5";
  o.set = {"model.hidden=[16]"};
  const auto points = expand_points(o);
  ASSERT_EQ(points.size(), 2u);
  EXPECT_EQ(point_config(o, points[0]).model.hidden, std::vector<int>{16});
  config::GridModelKeys keys;
  EXPECT_EQ(point_config(o, points[1], &keys).model.name, "lenet5");
  EXPECT_EQ(keys.left_out, std::vector<std::string>{"model.hidden"});
  o.set = {"model.patch=7"};
  const auto refused = refusal(o);
  EXPECT_NE(refused.find("--set model.patch: model mlp does not read it (vit does)"), std::string::npos)
      << refused;
}

TEST(BenchThroughput, UnknownStrategyListsTheRegisteredOnes) {
  auto o = tiny();
  o.strategies = "local,warp_drive";
  const auto message = refusal(o);
  EXPECT_EQ(message.rfind("--strategies: ", 0), 0u) << message;
  EXPECT_NE(message.find("warp_drive"), std::string::npos) << message;
  for (const auto& info : parallel::registered_strategies()) {
    EXPECT_NE(message.find(info.name), std::string::npos) << info.name << " missing from: " << message;
  }
}

TEST(BenchThroughput, SweepOrderAndEachPointsConfiguration) {
  BenchThroughputOptions o;
  o.models = "MLP,resnet18";
  o.batches = "8,16";
  o.precisions = "fp32,bf16";
  o.workers = "1,2";
  o.strategies = "local,dsgd";  // dsgd: the dAD paper's name for data_parallel
  o.steps = 3;
  o.warmup = 2;
  o.set = {"optim.name=adam", "parallel.data_parallel.bucket_mb=1"};
  const auto points = expand_points(o);
  ASSERT_EQ(points.size(), 32u);
  EXPECT_EQ(points[0].model, "mlp");
  EXPECT_EQ(points[1].strategy, "data_parallel");
  EXPECT_EQ(points[2].workers, 2);
  EXPECT_EQ(points[4].precision, "bf16");
  EXPECT_EQ(points[8].batch, 16);
  EXPECT_EQ(points[16].model, "resnet18");

  const auto dp = point_config(o, points[3]);  // mlp, 8, fp32, 2 workers, data_parallel
  EXPECT_EQ(dp.nproc, 2);
  EXPECT_EQ(dp.parallel.strategy, "data_parallel");
  EXPECT_EQ(dp.optim.name, "adam");
  EXPECT_EQ(dp.optim.momentum, 0.0);  // sgd's default momentum is not forced onto adam
  EXPECT_EQ(dp.data.dataset, "synthetic");
  EXPECT_EQ(dp.data.synthetic_shape, (std::vector<std::int64_t>{1, 28, 28}));
  EXPECT_EQ(dp.train.max_steps, 5);
  EXPECT_EQ(dp.data.synthetic_size, 8 * 2 * 5);  // one epoch of 5 steps on each of 2 ranks
  const auto resnet = point_config(o, points[16]);
  EXPECT_EQ(resnet.data.synthetic_shape, (std::vector<std::int64_t>{3, 32, 32}));
  EXPECT_EQ(resnet.optim.name, "adam");

  // The data_parallel section reaches data_parallel's points only (local would refuse it).
  o.set = {"parallel.data_parallel.bucket_mb=1"};
  const auto local = point_config(o, points[0]);
  EXPECT_EQ(local.parallel.strategy, "local");
  EXPECT_EQ(local.optim.name, "sgd");
  EXPECT_EQ(local.optim.momentum, 0.9);
}

// The sweep runs as an experiment whose runs are the points: each run's overrides make, with no
// base file (as experiment::run_experiment reads them), exactly the point's configuration.
TEST(BenchThroughput, SweepIsAnExperimentOfItsPoints) {
  BenchThroughputOptions o;
  o.models = "mlp";
  o.workers = "1,2";
  o.strategies = "local,decentralized";
  o.steps = 3;
  o.warmup = 1;
  o.set = {"parallel.graph.nodes=3"};
  const auto points = expand_points(o);
  const auto runs = experiment::expand_runs(sweep_experiment(o, points));
  ASSERT_EQ(runs.size(), points.size());
  for (std::size_t i = 0; i < runs.size(); ++i) {
    SCOPED_TRACE(runs[i].name);
    EXPECT_EQ(runs[i].name, fmt::format("point{:03d}", i));
    EXPECT_EQ(runs[i].overrides, point_overrides(o, points[i]));
    EXPECT_EQ(config::to_json(config::parse_run_config("{}", "(no base file)", runs[i].overrides)),
              config::to_json(point_config(o, points[i])));
  }
  EXPECT_EQ(point_config(o, points[1]).data.synthetic_size, 32 * 3 * 5);  // 3 graph nodes, 5 batches each
}

TEST(BenchThroughput, MoreWorkersThanTheHostRunsAreRefusedBeforeAnyPoint) {
  auto o = tiny();
  o.workers = "1,100000";
  const auto message = refusal(o);
  EXPECT_EQ(message.rfind("--workers: 100000 local workers are more than this host runs", 0), 0u) << message;
}

// Rank 1 is the slower one at the first timed step, rank 0 at the second: each step counts its
// slowest rank, so the time is 0.3 + 0.5 s for 2 x 16 samples.
TEST(BenchThroughput, ReportsCombineOverTheSlowestRankPerStep) {
  const ThroughputPoint point{"mlp", 8, "fp32", 2, "data_parallel"};
  const std::string rank0 =
      R"({"rank":0,"status":"ok","parameters":100,"step_seconds":[0.2,0.5],"samples":[16,16],)"
      R"("parameters_bytes":400,"gradients_bytes":400,"optimizer_bytes":800,"peak_rss_bytes":1000})";
  const std::string rank1 =
      R"({"rank":1,"status":"ok","parameters":100,"step_seconds":[0.3,0.1],"samples":[16,16],)"
      R"("parameters_bytes":400,"gradients_bytes":400,"optimizer_bytes":800,"peak_rss_bytes":2000})";
  const auto r = combine_reports(point, 2, 1, {rank0, rank1});
  EXPECT_EQ(r.status, "ok");
  EXPECT_NEAR(r.samples_per_second, 32 / 0.8, 1e-9);
  EXPECT_NEAR(r.step_ms, 400.0, 1e-9);
  EXPECT_EQ(r.parameters, 100);
  ASSERT_EQ(r.ranks.size(), 2u);
  EXPECT_EQ(r.ranks[1].peak_rss_bytes, 2000u);
  EXPECT_EQ(r.ranks[0].optimizer_bytes, 800u);

  const auto refused = combine_reports(
      point, 2, 1, {"", R"({"rank":1,"status":"refused","reason":"optim.name: lbfgs is not for this"})"});
  EXPECT_EQ(refused.status, "refused");
  EXPECT_EQ(refused.reason, "optim.name: lbfgs is not for this");
  const auto missing = combine_reports(point, 2, 1, {rank0, ""});
  EXPECT_EQ(missing.status, "failed");
  EXPECT_EQ(missing.reason, "rank 1 wrote no report");
  EXPECT_EQ(combine_reports(point, 2, 1, {}).status, "failed");
}

TEST(BenchThroughput, JsonLineHasExactlyTheFields) {
  ThroughputResult r;
  r.point = {"resnet18", 32, "bf16", 2, "data_parallel"};
  r.steps = 20;
  r.warmup = 5;
  r.parameters = 11173962;
  r.samples_per_second = 123.456;
  r.step_ms = 518.4321;
  r.ranks = {{0, 1 << 20, 4, 4, 8}, {1, 2 << 20, 4, 4, 8}};
  const auto j = nlohmann::json::parse(to_json_line(r));
  std::set<std::string> keys;
  for (const auto& item : j.items()) keys.insert(item.key());
  EXPECT_EQ(keys,
            (std::set<std::string>{"model", "batch", "precision", "workers", "strategy", "status", "steps",
                                   "warmup", "parameters", "samples_per_second", "step_ms", "ranks"}));
  EXPECT_NEAR(j["samples_per_second"].get<double>(), 123.46, 1e-9);
  ASSERT_EQ(j["ranks"].size(), 2u);
  EXPECT_EQ(j["ranks"][1]["peak_rss_bytes"], 2 << 20);
  EXPECT_EQ(j["ranks"][1]["optimizer_bytes"], 8);
  r.status = "refused";
  r.reason = "needs 2 ranks";
  EXPECT_EQ(nlohmann::json::parse(to_json_line(r))["reason"], "needs 2 ranks");
}

TEST(BenchThroughput, MarkdownIsAThroughputTableWithARowPerPoint) {
  auto point = [](std::string strategy, int workers, double sps) {
    ThroughputResult r;
    r.point = {"mlp", 8, "fp32", workers, std::move(strategy)};
    r.samples_per_second = sps;
    r.ranks.resize(static_cast<std::size_t>(workers));
    for (int w = 0; w < workers; ++w) r.ranks[w] = {w, 3 << 20, 1 << 20, 1 << 20, 2 << 20, 4 << 20};
    return r;
  };
  auto refused = point("decentralized", 1, 0.0);
  refused.status = "refused";
  refused.reason = "a | b";
  refused.ranks.clear();
  std::ostringstream out;
  write_markdown(out, {point("local", 1, 100.0), point("data_parallel", 2, 150.26), refused});
  const auto text = out.str();
  EXPECT_NE(text.find("| model | batch | local fp32 1w | data_parallel fp32 2w | decentralized fp32 1w |"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("| mlp | 8 | 100.0 | 150.3 | refused |"), std::string::npos) << text;
  EXPECT_NE(
      text.find(
          "| mlp | 8 | fp32 | 2 | data_parallel | 150.3 | 0.00 | 3.00 / 3.00 | 4.00 / 4.00 | 1.00 / 1.00 | "
          "1.00 / 1.00 | 2.00 / 2.00 | ok |"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("| refused: a \\| b |"), std::string::npos) << text;
}

// Ψ of mlp with one hidden layer of 16 on 1x28x28 images and 10 classes.
constexpr std::uint64_t kTinyPsi = 784 * 16 + 16 + 16 * 10 + 10;
constexpr std::uint64_t kCarriedValues = parallel::DataParallel::kMaxCarriedValues;

// The whole command: real workers (1 and 2) for local and data_parallel, Adam, 2 timed steps; then
// a configuration a strategy refuses (decentralized nodes step with sgd, adam or adamw only).
TEST(BenchThroughput, TinySweepThroughTheBinary) {
  dtrain::data::testing::TempDir dir;
  const std::string json = dir / "points.jsonl";
  const std::string markdown = dir / "table.md";
  const auto out = dtrain::testing::run(
      "bench throughput --models mlp --batches 8 --workers 1,2 --strategies local,data_parallel --steps 2 "
      "--warmup 1 --set optim.name=adam --set 'model.hidden=[16]' --set train.threads=1 --json " +
          json + " --markdown " + markdown,
      dir.str());
  ASSERT_EQ(out.exit_code, 0) << out.err;
  EXPECT_EQ(out.out, "");  // the lines went to --json
  std::ifstream lines(json);
  std::vector<nlohmann::json> rows;
  for (std::string line; std::getline(lines, line);) rows.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(rows.size(), 4u);
  const std::vector<std::pair<int, std::string>> expected{
      {1, "local"}, {1, "data_parallel"}, {2, "local"}, {2, "data_parallel"}};
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& row = rows[i];
    SCOPED_TRACE(row.dump());
    EXPECT_EQ(row["status"], "ok");
    EXPECT_EQ(row["model"], "mlp");
    EXPECT_EQ(row["batch"], 8);
    EXPECT_EQ(row["precision"], "fp32");
    EXPECT_EQ(row["workers"], expected[i].first);
    EXPECT_EQ(row["strategy"], expected[i].second);
    EXPECT_EQ(row["steps"], 2);
    EXPECT_EQ(row["parameters"], kTinyPsi);
    EXPECT_GT(row["samples_per_second"].get<double>(), 0.0);
    ASSERT_EQ(row["ranks"].size(), static_cast<std::size_t>(expected[i].first));
    for (const auto& rank : row["ranks"]) {
      EXPECT_GT(rank["peak_rss_bytes"].get<std::uint64_t>(), 10u << 20);  // LibTorch alone is more
      // Planned before the first step: the process then, and Adam's 16 bytes a parameter.
      EXPECT_GT(rank["planned_peak_bytes"].get<std::uint64_t>(), (10u << 20) + 16 * kTinyPsi);
      // ZeRO's accounting of a replica with Adam: 4Ψ, 4Ψ, 8Ψ on every rank; data_parallel's flat
      // gradient buffer also holds the slots of the values it carries (the loss) in its last bucket.
      const std::uint64_t carried = expected[i].second == "data_parallel" ? 4 * kCarriedValues : 0;
      EXPECT_EQ(rank["parameters_bytes"], 4 * kTinyPsi);
      EXPECT_EQ(rank["gradients_bytes"], 4 * kTinyPsi + carried);
      EXPECT_EQ(rank["optimizer_bytes"], 8 * kTinyPsi);
    }
  }
  std::ifstream md(markdown);
  const std::string table((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  EXPECT_NE(table.find("| model | batch | local fp32 1w | data_parallel fp32 1w | local fp32 2w | "
                       "data_parallel fp32 2w |"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("| mlp | 8 | fp32 | 2 | data_parallel | "), std::string::npos) << table;
  EXPECT_NE(out.err.find("| mlp | 8 | fp32 | 1 | local | "), std::string::npos) << out.err;  // also on stderr

  // At 1 worker the strategy refuses lbfgs when built (in the worker); at 2 workers 3 graph nodes cannot
  // be spread evenly, refused before any worker starts.
  const auto refused = dtrain::testing::run(
      "bench throughput --models mlp --batches 8 --workers 1,2 --strategies decentralized --steps 1 --warmup "
      "0 "
      "--set optim.name=lbfgs --set parallel.graph.nodes=3 --set 'model.hidden=[16]' --set train.threads=1",
      dir.str());
  ASSERT_EQ(refused.exit_code, 0) << refused.err;
  std::istringstream refused_lines(refused.out);
  std::vector<nlohmann::json> refusals;
  for (std::string line; std::getline(refused_lines, line);) refusals.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(refusals.size(), 2u) << refused.out;
  EXPECT_EQ(refusals[0]["status"], "refused");
  EXPECT_NE(refusals[0]["reason"].get<std::string>().find("optim.name: lbfgs"), std::string::npos)
      << refusals[0].dump();
  EXPECT_EQ(refusals[1]["status"], "refused");
  EXPECT_NE(refusals[1]["reason"].get<std::string>().find("3"), std::string::npos) << refusals[1].dump();
  EXPECT_EQ(refusals[1]["ranks"].size(), 0u);
  EXPECT_NE(refused.err.find("refused: optim.name: lbfgs"), std::string::npos) << refused.err;
}

TEST(BenchThroughput, BadOptionIsOneLineThroughTheBinary) {
  dtrain::data::testing::TempDir dir;
  const auto out = dtrain::testing::run("bench throughput --strategies local,nope --workers 1", dir.str());
  EXPECT_EQ(out.exit_code, 2);
  EXPECT_EQ(out.err.rfind("dtrain: error: --strategies: ", 0), 0u) << out.err;
  EXPECT_EQ(std::count(out.err.begin(), out.err.end(), '\n'), 1) << out.err;
  const auto unwritable = dtrain::testing::run(
      "bench throughput --models mlp --workers 1 --json " + (dir / "no/such/folder.jsonl"), dir.str());
  EXPECT_EQ(unwritable.exit_code, 2);
  EXPECT_NE(unwritable.err.find("--json "), std::string::npos) << unwritable.err;
  EXPECT_NE(unwritable.err.find(": cannot write this file"), std::string::npos) << unwritable.err;
}

}  // namespace
}  // namespace dtrain::cli
