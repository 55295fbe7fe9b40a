// Where a process's rank, count and rendezvous come from: mpirun, srun, torchrun-style variables
// or the config, in that order; and the errors that say what is missing.
#include <gtest/gtest.h>

#include <map>

#include "engine/core/error.h"
#include "engine/distribute/process_group.h"

namespace tandem::distribute {
namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(ProcessGroup, NoLauncherAndNoKeysIsOneProcess) {
  ProcessGroupSpec s = resolve_process_group({}, env_of({}));
  EXPECT_EQ(s.rank, 0);
  EXPECT_EQ(s.size, 1);
  EXPECT_FALSE(s.multi_process());
  EXPECT_EQ(s.describe(), "a single process");
}

TEST(ProcessGroup, OpenMpiComesBeforeSlurmAndTorchrunVariables) {
  auto env = env_of({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"SLURM_PROCID", "0"},
                     {"SLURM_NTASKS", "4"}, {"RANK", "3"}, {"WORLD_SIZE", "8"}, {"MASTER_ADDR", "node-a"}});
  ProcessGroupSpec s = resolve_process_group({}, env);
  EXPECT_EQ(s.source, "OpenMPI");
  EXPECT_EQ(s.rank, 1);
  EXPECT_EQ(s.size, 2);
  EXPECT_EQ(s.address, "node-a");
  EXPECT_EQ(s.port, kDefaultRendezvousPort);
}

TEST(ProcessGroup, SlurmTakesTheFirstNodeOfTheStepAsTheRendezvous) {
  auto env = env_of({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "4"}, {"SLURM_JOB_ID", "777"},
                     {"SLURM_STEP_NODELIST", "gpu[07-10],login1"}, {"MASTER_PORT", "31000"}});
  ProcessGroupSpec s = resolve_process_group({}, env);
  EXPECT_EQ(s.source, "Slurm");
  EXPECT_EQ(s.rank, 2);
  EXPECT_EQ(s.size, 4);
  EXPECT_EQ(s.address, "gpu07");
  EXPECT_EQ(s.port, 31000);
  EXPECT_EQ(s.run_id, "777");
}

TEST(ProcessGroup, TorchrunVariablesAndTheTokenFromTheEnvironment) {
  auto env = env_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29600"},
                     {"TANDEM_DIST_TOKEN", "secret"}});
  ProcessGroupRequest keys;
  keys.token = "from-config";
  ProcessGroupSpec s = resolve_process_group(keys, env);
  EXPECT_EQ(s.source, "environment (RANK, WORLD_SIZE)");
  EXPECT_EQ(s.token, "secret");
  EXPECT_EQ(s.describe(), "process 0 of 2 (from environment (RANK, WORLD_SIZE)), rendezvous at 127.0.0.1:29600");
}

TEST(ProcessGroup, ConfigKeysWhenNoLauncherSaysAnything) {
  ProcessGroupRequest keys{.processes = 3, .process_rank = 2, .address = "10.0.0.5", .port = 4000, .token = "t",
                           .run_id = "exp-1"};
  ProcessGroupSpec s = resolve_process_group(keys, env_of({}));
  EXPECT_EQ(s.source, "config");
  EXPECT_EQ(s.rank, 2);
  EXPECT_EQ(s.size, 3);
  EXPECT_EQ(s.address, "10.0.0.5");
  EXPECT_EQ(s.port, 4000);
  EXPECT_EQ(s.token, "t");
  EXPECT_EQ(s.run_id, "exp-1");
}

void expect_invalid(const ProcessGroupRequest& keys, const EnvLookup& env, const std::string& says) {
  try {
    resolve_process_group(keys, env);
    ADD_FAILURE() << "no error; expected one saying " << says;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}

TEST(ProcessGroup, MistakesSayWhichVariableOrKey) {
  expect_invalid({}, env_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}}), "not below the process count 2");
  expect_invalid({}, env_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}}), "RANK (environment (RANK, WORLD_SIZE)) is 'x'");
  expect_invalid({}, env_of({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}}), "set MASTER_ADDR");
  expect_invalid({.processes = 2}, env_of({}), "give each process its distribute.process_rank");
  expect_invalid({.process_rank = 1}, env_of({}), "give distribute.processes too");
  expect_invalid({}, env_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "70000"}}),
                 "not a TCP port");
}

TEST(ProcessGroup, FirstSlurmHost) {
  EXPECT_EQ(first_slurm_host("node01"), "node01");
  EXPECT_EQ(first_slurm_host("node[03-05,7],gpu1"), "node03");
  EXPECT_EQ(first_slurm_host("a,b"), "a");
  EXPECT_EQ(first_slurm_host("rack1-n[8,9]"), "rack1-n8");
}

}  // namespace
}  // namespace tandem::distribute
