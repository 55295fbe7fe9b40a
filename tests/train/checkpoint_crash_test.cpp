// Atomicity: saves that fail (a throw after each stage, a full disk) or whose process is killed
// (SIGKILL at each stage, and at arbitrary moments of large saves) never leave a half checkpoint
// under a real name, never touch the earlier ones, and their temporaries are cleaned next run.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "engine/train/checkpoint/checkpoint.h"
#include "tests/train/checkpoint_util.h"

namespace tandem::train {
namespace {

using testing::TempDir;

const std::vector<std::string> kStages = {"model", "optimizer", "meta", "synced", "renamed"};

CheckpointMeta meta_at(int64_t step) {
  CheckpointMeta m;
  m.step = step;
  m.replicas.resize(1);
  return m;
}

struct Trained {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::Optimizer> optimizer;
};

Trained large(int megabytes) {
  Trained t{testing::large_model(megabytes), nullptr};
  t.optimizer = optim::make_optimizer(t.model->named_parameters(), {.name = "sgd", .momentum = 0.0f});
  return t;
}

bool has_temporaries(const std::filesystem::path& dir) {
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename().string().starts_with(".tmp-")) return true;
  }
  return false;
}

// Every step-* directory must be complete: no half checkpoint under a real name, ever.
void expect_all_complete(const std::filesystem::path& dir) {
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (!e.path().filename().string().starts_with("step-")) continue;
    EXPECT_NO_THROW(validate_checkpoint(e.path())) << e.path();
  }
}

// Runs body in a child process and returns its wait status. The child never returns into gtest.
template <typename F>
int in_child(F&& body) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int code = 99;
    try {
      code = body();
    } catch (...) {
      code = 98;
    }
    ::_exit(code);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

TEST(CheckpointCrash, FailureAfterEachStageLeavesThePreviousCheckpoint) {
  for (const std::string& stage : kStages) {
    SCOPED_TRACE(stage);
    TempDir dir;
    auto model = testing::small_model(1);
    auto optimizer = optim::make_optimizer(model->named_parameters(), {.name = "adamw"});
    CheckpointManager(dir.path(), 0).save(*model, *optimizer, meta_at(1));
    CheckpointOptions options{.keep_last = 1, .after_stage = [&](std::string_view s) {
                                if (s == stage) throw_error(ErrorCode::kResourceExhausted, "injected at {}", s);
                              }};
    CheckpointManager failing(dir.path(), options);
    EXPECT_THROW(failing.save(*model, *optimizer, meta_at(2)), Error);
    EXPECT_FALSE(has_temporaries(dir.path()));
    expect_all_complete(dir.path());
    EXPECT_TRUE(std::filesystem::exists(dir / "step-00000001"));  // keep_last never ran
    // Up to "synced" the new one does not exist; once renamed it is complete (only the parent's fsync is owed).
    EXPECT_EQ(CheckpointManager(dir.path(), 0).latest()->filename(),
              stage == "renamed" ? "step-00000002" : "step-00000001");
  }
}

TEST(CheckpointCrash, WriterKilledAtEachStage) {
  Trained t = large(8);
  for (const std::string& stage : kStages) {
    SCOPED_TRACE(stage);
    TempDir dir;
    CheckpointManager(dir.path(), 0).save(*t.model, *t.optimizer, meta_at(1));
    int status = in_child([&] {
      CheckpointOptions options{.keep_last = 1, .after_stage = [&](std::string_view s) {
                                  if (s == stage) ::raise(SIGKILL);
                                }};
      CheckpointManager(dir.path(), options).save(*t.model, *t.optimizer, meta_at(2));
      return 0;
    });
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
    expect_all_complete(dir.path());
    CheckpointManager next(dir.path(), 0);  // the next run
    EXPECT_FALSE(has_temporaries(dir.path()));
    EXPECT_EQ(next.latest()->filename(), stage == "renamed" ? "step-00000002" : "step-00000001");
  }
}

TEST(CheckpointCrash, WriterKilledAtArbitraryMomentsOfLargeSaves) {
  Trained t = large(32);
  TempDir dir;
  auto start = std::chrono::steady_clock::now();
  CheckpointManager(dir.path(), 2).save(*t.model, *t.optimizer, meta_at(1));
  auto save_time = std::chrono::steady_clock::now() - start;
  // Kill points spread over one save (writing model, optimizer, meta, renaming, pruning) and beyond.
  int64_t next_step = 2;
  for (double fraction : {0.05, 0.2, 0.4, 0.6, 0.8, 0.95, 1.1, 1.5, 2.5, 3.7}) {
    SCOPED_TRACE(fraction);
    pid_t pid = ::fork();
    if (pid == 0) {
      CheckpointManager manager(dir.path(), 2);
      for (int64_t step = next_step;; ++step) manager.save(*t.model, *t.optimizer, meta_at(step));
    }
    std::this_thread::sleep_for(std::chrono::duration_cast<std::chrono::microseconds>(save_time * fraction));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status));
    expect_all_complete(dir.path());
    CheckpointManager next(dir.path(), 2);
    EXPECT_FALSE(has_temporaries(dir.path()));
    auto latest = next.latest();
    ASSERT_TRUE(latest.has_value());
    next_step = validate_checkpoint(*latest).step + 1;
  }
  RecordProperty("save_ms", static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(save_time).count()));
  RecordProperty("saves_completed_by_killed_writers", static_cast<int>(next_step - 2));
}

TEST(CheckpointCrash, DiskFullThrowsAndKeepsThePreviousCheckpoint) {
  Trained t = large(8);
  TempDir dir;
  CheckpointManager(dir.path(), 1).save(*t.model, *t.optimizer, meta_at(1));
  // A file-size limit makes write() fail with EFBIG, as a full disk fails with ENOSPC.
  int status = in_child([&] {
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit limit{1 << 20, 1 << 20};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    try {
      CheckpointManager(dir.path(), 1).save(*t.model, *t.optimizer, meta_at(2));
    } catch (const Error& e) {
      std::string message = e.what();
      bool named = message.find("model.safetensors") != std::string::npos &&
                   message.find("File too large") != std::string::npos;
      return e.code() == ErrorCode::kResourceExhausted && named ? 0 : 1;
    }
    return 2;
  });
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: wrong error, 2: no error";
  EXPECT_FALSE(has_temporaries(dir.path()));
  EXPECT_EQ(CheckpointManager(dir.path(), 1).latest()->filename(), "step-00000001");
}

TEST(CheckpointCrash, UnwritableDirectoryThrowsWithThePath) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  TempDir dir;
  auto model = testing::small_model(1);
  auto optimizer = optim::make_optimizer(model->named_parameters(), {.name = "sgd"});
  CheckpointManager manager(dir.path(), 0);
  manager.save(*model, *optimizer, meta_at(1));
  std::filesystem::permissions(dir.path(), std::filesystem::perms::owner_write, std::filesystem::perm_options::remove);
  try {
    manager.save(*model, *optimizer, meta_at(2));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir.path().string()), std::string::npos) << e.what();
  }
  std::filesystem::permissions(dir.path(), std::filesystem::perms::owner_write, std::filesystem::perm_options::add);
  EXPECT_EQ(manager.latest()->filename(), "step-00000001");
}

}  // namespace
}  // namespace tandem::train
