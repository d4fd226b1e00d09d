// The hosts of a job over ssh: DeepSpeed's hostfile and Horovod's -H list, good and malformed (each
// error names the line), and the shell commands each host runs.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "dtrain/launch/HostLaunch.h"
#include "dtrain/launch/Hostfile.h"

namespace dtrain::launch {
namespace {

// The message of the std::invalid_argument that `parse` throws, or "" when it throws none.
template <class F>
std::string error_of(F parse) {
  try {
    parse();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(HostfileTest, ReadsHostsSlotsCommentsAndBlankLines) {
  const auto hosts = parse_hostfile(
      "# two nodes\n"
      "\n"
      "worker-1 slots=4   # the rendezvous\n"
      "  alice@10.0.0.2\tslots=4\n"
      "node3\n",
      "hosts.txt");
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[0].name, "worker-1");
  EXPECT_EQ(hosts[0].slots, 4);
  EXPECT_EQ(hosts[0].origin, "hosts.txt:3");
  EXPECT_EQ(hosts[1].name, "alice@10.0.0.2");
  EXPECT_EQ(hosts[1].slots, 4);
  EXPECT_EQ(hosts[2].name, "node3");
  EXPECT_EQ(hosts[2].slots, 1);  // a bare host is one slot, as in OpenMPI's hostfile
}

TEST(HostfileTest, EachMalformedLineIsNamedWithWhatIsWrong) {
  const std::string good = "a slots=2\n";
  EXPECT_EQ(
      error_of([&] { parse_hostfile(good + "b slots=x\n", "h"); }),
      "h:2: slots must be a whole number >= 1, not 'x'; expected 'HOST slots=N' (N >= 1), found 'b slots=x'");
  EXPECT_EQ(
      error_of([&] { parse_hostfile(good + "\nb slots=0\n", "h"); }),
      "h:3: slots must be a whole number >= 1, not '0'; expected 'HOST slots=N' (N >= 1), found 'b slots=0'");
  EXPECT_EQ(error_of([&] { parse_hostfile(good + "b cpus=2\n", "h"); }),
            "h:2: 'cpus=2' is not slots=N; expected 'HOST slots=N' (N >= 1), found 'b cpus=2'");
  EXPECT_EQ(
      error_of([&] { parse_hostfile("# c\nb slots=2 gpus=1\n", "h"); }),
      "h:2: unexpected 'gpus=1' after the slots; expected 'HOST slots=N' (N >= 1), found 'b slots=2 gpus=1'");
  EXPECT_EQ(
      error_of([&] { parse_hostfile("slots=2\n", "h"); }),
      "h:1: the line starts with an option, not a host; expected 'HOST slots=N' (N >= 1), found 'slots=2'");
  EXPECT_EQ(error_of([&] { parse_hostfile(good + "c\na slots=1\n", "h"); }),
            "h:3: host 'a' is listed twice (first at h:1); give it once with all its slots");
  EXPECT_EQ(error_of([&] { parse_hostfile("# nothing\n\n", "h"); }),
            "h: no hosts (every line is blank or a comment); expected lines 'HOST slots=N'");
  EXPECT_NE(error_of([] {
              read_hostfile("/nonexistent/hosts");
            }).find("--hostfile: cannot read '/nonexistent/hosts'"),
            std::string::npos);
}

TEST(HostfileTest, HostListGivesSlotsAfterAColon) {
  const auto hosts = parse_host_list("h1:2,h2:2,h3");
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[1].name, "h2");
  EXPECT_EQ(hosts[1].slots, 2);
  EXPECT_EQ(hosts[2].slots, 1);
  EXPECT_EQ(error_of([] { parse_host_list("h1:2,h2:two"); }),
            "-H item 2: slots must be a whole number >= 1, found 'h2:two'; expected HOST[:SLOTS],... e.g. -H "
            "a:2,b:2");
  EXPECT_EQ(error_of([] { parse_host_list("h1,,h2"); }),
            "-H item 2: expected a host name, found ''; expected HOST[:SLOTS],... e.g. -H a:2,b:2");
  EXPECT_EQ(error_of([] { parse_host_list("h1,h1:2"); }),
            "-H item 2: host 'h1' is listed twice (first at -H item 1); give it once with all its slots");
}

// What /bin/sh makes of a quoted word: the word itself.
std::string through_shell(const std::string& word) {
  FILE* pipe = ::popen(("printf %s " + shell_quote(word)).c_str(), "r");
  std::string out;
  char buffer[256];
  for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0;) out.append(buffer, n);
  ::pclose(pipe);
  return out;
}

TEST(HostfileTest, ShellQuotingKeepsEveryWordWhole) {
  EXPECT_EQ(shell_quote("train.max_steps=20"), "train.max_steps=20");
  EXPECT_EQ(shell_quote("a b"), "'a b'");
  for (const std::string word : {"a b", "it's", "$HOME", "x;rm -rf /", "", "\"q\"", "tab\there"}) {
    EXPECT_EQ(through_shell(word), word) << "quoted as " << shell_quote(word);
  }
}

TEST(HostfileTest, EachHostRunsTheMultiNodeLauncherWithItsNodeRank) {
  HostLaunchOptions options;
  options.hosts = parse_host_list("alice@node0:2,node1:2");
  options.job_id = "job-1";
  options.remote_dtrain = "/opt/dtrain/bin/dtrain";
  options.working_directory = "/home/alice/my project";
  options.master_port = 29600;
  options.launch_flags = {"--threads", "1"};
  options.command = {"/opt/dtrain/bin/dtrain", "train", "c.yaml", "train.max_steps=2"};
  options.environment = {{"OMP_NUM_THREADS", "1"}, {"SECRET_TOKEN", "x"}, {"DTRAIN_DATA", "/d"}};
  const std::string command = remote_launch_command(options, 1);
  for (const char* part :
       {"env DTRAIN_DATA=/d OMP_NUM_THREADS=1 /opt/dtrain/bin/dtrain launch --nnodes 2 --node-rank 1 "
        "--nproc-per-node 2 --master-addr node0 --master-port 29600 --run-id job-1 --threads 1 -- "
        "/opt/dtrain/bin/dtrain train c.yaml train.max_steps=2",
        "node1.pid", "$HOME/.dtrain/jobs/job-1", "/home/alice/my project"}) {
    EXPECT_NE(command.find(part), std::string::npos) << part << " is not in " << command;
  }
  EXPECT_EQ(command.find("SECRET_TOKEN"), std::string::npos);  // only the listed prefixes go along
  EXPECT_NE(remote_stop_command("job-1", 1, std::chrono::seconds(5)).find("node1.pid"), std::string::npos);
  EXPECT_NO_THROW(check_job_id(new_job_id()));
  EXPECT_EQ(
      error_of([] { check_job_id("../x"); }),
      "dtrain launch: a job id is letters, digits, '.', '_' and '-', found '../x'; choose another --job-id");
}

}  // namespace
}  // namespace dtrain::launch
