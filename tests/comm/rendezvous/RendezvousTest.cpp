// resolve_rendezvous(): which source wins, how the sources combine, and how malformed values are
// reported (by the variable or option that holds them); launcher_of(): which launcher it was.
#include <gtest/gtest.h>

#include <stdexcept>

#include "dtrain/comm/rendezvous/Rendezvous.h"

namespace dtrain::comm {
namespace {

void expect_invalid(const RendezvousOptions& options, const Environment& env, const std::string& mention) {
  try {
    resolve_rendezvous(options, env);
    ADD_FAILURE() << "accepted; expected an error mentioning " << mention;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(mention), std::string::npos) << e.what();
  }
}

TEST(Rendezvous, DefaultIsOneProcess) {
  const RendezvousInfo info = resolve_rendezvous({}, {});
  EXPECT_EQ(info.rank, 0);
  EXPECT_EQ(info.world_size, 1);
  EXPECT_EQ(info.local_rank, 0);
  EXPECT_EQ(info.local_world_size, 1);
  EXPECT_EQ(info.master_addr, "127.0.0.1");
  EXPECT_EQ(info.master_port, 29500);
  EXPECT_FALSE(info.agent_store);
  EXPECT_EQ(info.source, "default");
}

TEST(Rendezvous, TorchrunEnvironment) {
  const Environment env{{"RANK", "3"},
                        {"WORLD_SIZE", "8"},
                        {"LOCAL_RANK", "1"},
                        {"LOCAL_WORLD_SIZE", "2"},
                        {"MASTER_ADDR", "10.0.0.5"},
                        {"MASTER_PORT", "1234"}};
  const RendezvousInfo info = resolve_rendezvous({}, env);
  EXPECT_EQ(info.source, "torchrun");
  EXPECT_EQ(info.rank, 3);
  EXPECT_EQ(info.world_size, 8);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_world_size, 2);
  EXPECT_EQ(info.master_addr, "10.0.0.5");
  EXPECT_EQ(info.master_port, 1234);
  EXPECT_FALSE(info.agent_store);
  EXPECT_TRUE(info.store_prefix.empty());
}

TEST(Rendezvous, TorchrunAgentStoreUsesTheAttemptPrefix) {
  const Environment env{{"RANK", "0"},
                        {"WORLD_SIZE", "2"},
                        {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                        {"TORCHELASTIC_RESTART_COUNT", "2"}};
  const RendezvousInfo info = resolve_rendezvous({}, env);
  EXPECT_TRUE(info.agent_store);
  EXPECT_EQ(info.restart_count, 2);
  EXPECT_EQ(info.store_prefix, "/worker/attempt_2");

  Environment not_agent = env;
  not_agent["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  EXPECT_FALSE(resolve_rendezvous({}, not_agent).agent_store);
}

TEST(Rendezvous, OptionsOverrideTheEnvironmentFieldByField) {
  RendezvousOptions options;
  options.rank = 1;
  options.world_size = 4;
  options.master_port = 4000;
  const Environment env{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "node7"}, {"MASTER_PORT", "1"}};
  const RendezvousInfo info = resolve_rendezvous(options, env);
  EXPECT_EQ(info.source, "options");
  EXPECT_EQ(info.rank, 1);
  EXPECT_EQ(info.world_size, 4);
  EXPECT_EQ(info.master_addr, "node7");  // not given explicitly: the environment fills it in
  EXPECT_EQ(info.master_port, 4000);
}

TEST(Rendezvous, DistUrlGivesTheAddress) {
  RendezvousOptions options;
  options.rank = 0;
  options.world_size = 2;
  options.dist_url = "tcp://192.168.1.2:23456";
  const Environment env{{"MASTER_ADDR", "ignored"}, {"MASTER_PORT", "1111"}};
  const RendezvousInfo info = resolve_rendezvous(options, env);
  EXPECT_EQ(info.master_addr, "192.168.1.2");
  EXPECT_EQ(info.master_port, 23456);

  options.dist_url = "tcp://[::1]:5000";
  EXPECT_EQ(resolve_rendezvous(options, {}).master_addr, "::1");

  options.dist_url = "env://";
  const RendezvousInfo from_env = resolve_rendezvous(options, env);
  EXPECT_EQ(from_env.master_addr, "ignored");
  EXPECT_EQ(from_env.master_port, 1111);
}

TEST(Rendezvous, TorchrunWinsOverOpenMpiAndSlurm) {
  const Environment env{{"RANK", "1"},
                        {"WORLD_SIZE", "2"},
                        {"OMPI_COMM_WORLD_RANK", "5"},
                        {"OMPI_COMM_WORLD_SIZE", "6"},
                        {"SLURM_PROCID", "7"},
                        {"SLURM_NTASKS", "8"}};
  const RendezvousInfo info = resolve_rendezvous({}, env);
  EXPECT_EQ(info.source, "torchrun");
  EXPECT_EQ(info.rank, 1);
  EXPECT_EQ(info.world_size, 2);
}

TEST(Rendezvous, OpenMpiWithMasterAddress) {
  const Environment env{{"OMPI_COMM_WORLD_RANK", "2"},
                        {"OMPI_COMM_WORLD_SIZE", "4"},
                        {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                        {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                        {"SLURM_PROCID", "9"},
                        {"MASTER_ADDR", "head"},
                        {"MASTER_PORT", "29600"}};
  const RendezvousInfo info = resolve_rendezvous({}, env);
  EXPECT_EQ(info.source, "openmpi");
  EXPECT_EQ(info.rank, 2);
  EXPECT_EQ(info.world_size, 4);
  EXPECT_EQ(info.local_rank, 0);
  EXPECT_EQ(info.local_world_size, 2);
  EXPECT_EQ(info.master_addr, "head");
  EXPECT_EQ(info.master_port, 29600);
}

TEST(Rendezvous, SlurmWithCompressedTasksPerNode) {
  const Environment env{{"SLURM_PROCID", "5"},
                        {"SLURM_NTASKS", "7"},
                        {"SLURM_LOCALID", "0"},
                        {"SLURM_NODEID", "3"},
                        {"SLURM_TASKS_PER_NODE", "2(x3),1"},
                        {"SLURM_LAUNCH_NODE_IPADDR", "10.1.1.1"}};
  const RendezvousInfo info = resolve_rendezvous({}, env);
  EXPECT_EQ(info.source, "slurm");
  EXPECT_EQ(info.rank, 5);
  EXPECT_EQ(info.world_size, 7);
  EXPECT_EQ(info.local_world_size, 1);  // the fourth node runs one task
  EXPECT_EQ(info.master_addr, "10.1.1.1");

  Environment with_master = env;
  with_master["MASTER_ADDR"] = "chosen";
  with_master["SLURM_NTASKS_PER_NODE"] = "4";
  with_master["SLURM_NODEID"] = "0";
  with_master["SLURM_NTASKS"] = "8";
  const RendezvousInfo chosen = resolve_rendezvous({}, with_master);
  EXPECT_EQ(chosen.master_addr, "chosen");
  EXPECT_EQ(chosen.local_world_size, 4);
}

TEST(Rendezvous, MalformedValuesNameTheVariable) {
  expect_invalid({}, {{"RANK", "abc"}, {"WORLD_SIZE", "2"}}, "RANK='abc'");
  expect_invalid({}, {{"RANK", "1"}, {"WORLD_SIZE", "2x"}}, "WORLD_SIZE='2x'");
  expect_invalid({}, {{"RANK", "2"}, {"WORLD_SIZE", "2"}}, "RANK=2");
  expect_invalid({}, {{"RANK", "-1"}, {"WORLD_SIZE", "2"}}, "RANK=-1");
  expect_invalid({}, {{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE=0");
  expect_invalid({}, {{"RANK", "0"}}, "WORLD_SIZE");
  expect_invalid({}, {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}, "MASTER_PORT=70000");
  expect_invalid({}, {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "0"}}, "MASTER_PORT=0");
  expect_invalid({}, {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "3"}, {"LOCAL_WORLD_SIZE", "2"}},
                 "LOCAL_RANK=3");
  expect_invalid({}, {{"OMPI_COMM_WORLD_RANK", "x"}, {"OMPI_COMM_WORLD_SIZE", "2"}},
                 "OMPI_COMM_WORLD_RANK='x'");
  expect_invalid({}, {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_TASKS_PER_NODE", "2(x"}},
                 "SLURM_TASKS_PER_NODE");

  RendezvousOptions options;
  options.rank = 4;
  options.world_size = 4;
  expect_invalid(options, {}, "options.rank=4");
  for (const char* url : {"http://a:1", "tcp://host", "tcp://:80", "tcp://h:99999", "tcp://h:p"}) {
    RendezvousOptions with_url;
    with_url.dist_url = url;
    expect_invalid(with_url, {}, "dist_url");
  }
  RendezvousOptions conflict;
  conflict.master_addr = "a";
  conflict.dist_url = "tcp://b:1";
  expect_invalid(conflict, {}, "give only one");
}

TEST(Rendezvous, LauncherOfEachEnvironment) {
  EXPECT_EQ(launcher_of({}), RendezvousSource::Default);
  EXPECT_EQ(launcher_of({{"MASTER_ADDR", "head"}, {"MASTER_PORT", "29500"}}), RendezvousSource::Default);
  EXPECT_EQ(launcher_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}}), RendezvousSource::Torchrun);
  // torchrun with one process is still a worker of torchrun's job.
  EXPECT_EQ(launcher_of({{"RANK", "0"}, {"WORLD_SIZE", "1"}}), RendezvousSource::Torchrun);
  EXPECT_EQ(launcher_of({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}}),
            RendezvousSource::OpenMpi);
  EXPECT_EQ(launcher_of({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}}), RendezvousSource::Slurm);
  // The order resolve_rendezvous reads them in.
  EXPECT_EQ(launcher_of(
                {{"RANK", "1"}, {"OMPI_COMM_WORLD_RANK", "5"}, {"SLURM_PROCID", "7"}, {"SLURM_NTASKS", "8"}}),
            RendezvousSource::Torchrun);
  EXPECT_EQ(launcher_of({{"OMPI_COMM_WORLD_RANK", "5"}, {"SLURM_PROCID", "7"}, {"SLURM_NTASKS", "8"}}),
            RendezvousSource::OpenMpi);
  // A Slurm step of one task (`srun --pty bash`), or one that does not say how many, starts no job.
  EXPECT_EQ(launcher_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}), RendezvousSource::Default);
  EXPECT_EQ(launcher_of({{"SLURM_PROCID", "0"}}), RendezvousSource::Default);
  EXPECT_EQ(launcher_of({{"SLURM_NTASKS", "4"}}), RendezvousSource::Default);
}

TEST(Rendezvous, SourceNamesTheLauncherOrTheOptions) {
  EXPECT_EQ(resolve_rendezvous({}, {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}).source, "default");
  RendezvousOptions options;
  options.rank = 1;
  options.world_size = 2;
  EXPECT_EQ(
      resolve_rendezvous(options, {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}}).source,
      "options");
  for (const auto source : {RendezvousSource::Default, RendezvousSource::Torchrun, RendezvousSource::OpenMpi,
                            RendezvousSource::Slurm, RendezvousSource::Options}) {
    EXPECT_EQ(kRendezvousSourceNames.parse(kRendezvousSourceNames.name(source), "source"), source);
  }
}

TEST(Rendezvous, PortZeroOnlyForASingleProcess) {
  RendezvousOptions options;
  options.master_port = 0;
  EXPECT_EQ(resolve_rendezvous(options, {}).master_port, 0);
}

}  // namespace
}  // namespace dtrain::comm
