// `dtrain train [CONFIG] [key=value ...] [--nproc N]`: one training run from a YAML file, or from
// the dAD paper's flags without one (DadFlags.h). The flags are read here; the run itself, with or
// without workers of its own, is run::run_job (run/Run.h).
#include <iostream>
#include <memory>

#include "dtrain/cli/Commands.h"
#include "dtrain/cli/DadFlags.h"
#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/run/ResumeConfig.h"
#include "dtrain/run/Run.h"

namespace dtrain::cli {
namespace {

namespace fs = std::filesystem;

// The flags: the job's options as given (CONFIG in config_file, the key=value overrides), and the
// dAD paper's flags, which become overrides before the job runs.
struct TrainArgs {
  run::JobOptions job;
  bool print_config = false;
  DadFlags dad_flags;
};

// --nproc N as the override of the key it sets, last, so that it wins over nproc=M (Note [What a run
// records] in run/Run.h).
std::vector<config::Override> nproc_flag(const run::JobOptions& job) {
  if (job.nproc <= 0) return {};
  config::Override o;
  o.key = "nproc";
  o.value = std::to_string(job.nproc);
  o.text = "--nproc " + o.value;
  o.flag = true;
  return {o};
}

// CONFIG (without one, the dAD paper's defaults, or the resumed run's own config.yaml), then that
// paper's flags, then key=value overrides, then --nproc; on a resume, checked against the run's
// saved configuration (Note [What a resume may change]).
config::RunConfig load_config(const TrainArgs& a) {
  auto overrides = a.dad_flags.overrides();
  const auto given = config::parse_overrides(a.job.overrides);
  check_no_conflict(overrides, given);
  overrides.insert(overrides.end(), given.begin(), given.end());
  const auto nproc = nproc_flag(a.job);
  overrides.insert(overrides.end(), nproc.begin(), nproc.end());
  return run::load_run_config(a.job.config_file, overrides, a.job.resume, kDadDefaults, kDadDefaultsSource);
}

// CLI11 gives the first positional to CONFIG; without a file, a key=value (or a removal, ~key) there is
// an override.
void take_positionals(run::JobOptions& job) {
  auto& config = job.config_file;
  const bool override_like = config.find('=') != std::string::npos || config.rfind('~', 0) == 0;
  if (!override_like || fs::exists(config)) return;
  job.overrides.insert(job.overrides.begin(), config);
  config.clear();
}

// The job the flags describe. The workers it starts read the configuration as this process did:
// the dAD paper's flags and --nproc as the overrides they stand for, validated here already.
run::JobOptions job_options(const TrainArgs& a) {
  run::JobOptions job = a.job;
  std::vector<std::string> flags;
  for (const auto& o : a.dad_flags.overrides()) flags.push_back(o.key + "=" + o.value);
  job.overrides.insert(job.overrides.begin(), flags.begin(), flags.end());
  for (const auto& o : nproc_flag(a.job)) job.overrides.push_back(o.key + "=" + o.value);
  return job;
}

}  // namespace

Run add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "train",
      "Train a model from a YAML config, or without one from the dAD paper's flags (dotted key=value "
      "overrides after either)");
  auto a = std::make_shared<TrainArgs>();
  cmd->add_option("config", a->job.config_file,
                  "YAML configuration file; without it, the defaults below with the run folder "
                  "logs/<name>/ (the dAD paper's)");
  cmd->add_option(
      "overrides", a->job.overrides,
      "Overrides such as optim.lr=0.01 parallel.strategy=local; key=null (or ~key) removes a key");
  cmd->add_option("--nproc", a->job.nproc, "Start this many local workers (default: the config's nproc)")
      ->check(at_least(1));
  cmd->add_flag("--oversubscribe", a->job.oversubscribe,
                "Start more local workers than 4 per core (at least 16), the bound without it");
  cmd->add_option("--resume", a->job.resume,
                  "Continue from a run folder's latest checkpoint or a checkpoint file");
  cmd->add_option("--run-dir", a->job.run_dir, "Write into this run folder instead of a new one");
  cmd->add_option("--max-restarts", a->job.max_restarts,
                  "Restart the workers up to this many times when one fails; each restart continues from the "
                  "latest checkpoint")
      ->check(at_least(0));
  cmd->add_option("--dist-url", a->job.dist_url,
                  "Rendezvous as tcp://HOST:PORT (with --rank and --world-size)");
  cmd->add_option("--rank", a->job.rank, "This worker's rank")->check(at_least(0));
  cmd->add_option("--world-size,--num-nodes", a->job.world_size, "Number of workers")->check(at_least(1));
  cmd->add_option("--master-addr", a->job.master_addr, "Rendezvous host");
  cmd->add_option("--master-port", a->job.master_port, "Rendezvous port")->check(CLI::Range(0, 65535));
  cmd->add_flag("--print-config", a->print_config,
                "Print the effective configuration (CONFIG, flags and overrides applied, defaults filled in) "
                "as a run folder's config.yaml holds it, and exit without training");
  a->dad_flags.add_to(*cmd);
  cmd->footer(config_keys_help() + registered_names_help());
  return [a] {
    take_positionals(a->job);
    const auto cfg = checking_inputs([&] { return load_config(*a); });
    if (a->print_config) {
      std::cout << config::to_yaml(cfg) << std::flush;
      return kExitSuccess;
    }
    return run::run_job(cfg, job_options(*a));
  };
}

}  // namespace dtrain::cli
