// Unit tests of VersionClaim: one holder at a time, released on destruction (the lock file
// removed), taken back from a holder killed with -9, and a clear error when OUT is unusable.
#include "runtime/daemon/version_claim.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "runtime/file_util.h"

namespace sentier {
namespace {

namespace fs = std::filesystem;

std::string FreshOut(const std::string& name) {
  std::string out = ::testing::TempDir() + "/claim_" + name;
  EXPECT_TRUE(RemoveTree(out).ok());
  fs::create_directories(out);
  return out;
}

TEST(VersionClaimTest, OneHolderAtATime) {
  std::string out = FreshOut("one");
  auto a = VersionClaim::TryAcquire(out, "ranker", 2);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_NE(*a, nullptr);
  EXPECT_TRUE(fs::exists(out + "/.sentierd/claims/ranker/2.lock"));
  // A second open, even in this process, is another holder: refused.
  auto b = VersionClaim::TryAcquire(out, "ranker", 2);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, nullptr);
  // Other versions and models are independent.
  auto other = VersionClaim::TryAcquire(out, "ranker", 3);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*other, nullptr);
  a->reset();  // released: the lock file goes, the version can be claimed again
  EXPECT_FALSE(fs::exists(out + "/.sentierd/claims/ranker/2.lock"));
  auto c = VersionClaim::TryAcquire(out, "ranker", 2);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(*c, nullptr);
  (*c)->Release();
  (*c)->Release();  // idempotent
}

TEST(VersionClaimTest, KilledHolderLosesTheClaim) {
  std::string out = FreshOut("killed");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto claim = VersionClaim::TryAcquire(out, "towers", 1);
    char c = (claim.ok() && *claim != nullptr) ? 'y' : 'n';
    (void)!::write(ready[1], &c, 1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  ASSERT_EQ(c, 'y');
  auto held = VersionClaim::TryAcquire(out, "towers", 1);
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(*held, nullptr);
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  // The killed holder left its lock file behind but not its lock.
  EXPECT_TRUE(fs::exists(VersionClaim::LockPath(out, "towers", 1)));
  auto taken = VersionClaim::TryAcquire(out, "towers", 1);
  ASSERT_TRUE(taken.ok());
  EXPECT_NE(*taken, nullptr);
}

TEST(VersionClaimTest, UnusableOutputIsUnavailable) {
  std::string out = FreshOut("file");
  ASSERT_TRUE(WriteFileSynced(out + "/.sentierd", "not a directory").ok());
  auto claim = VersionClaim::TryAcquire(out, "ranker", 1);
  ASSERT_FALSE(claim.ok());
  EXPECT_EQ(claim.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(std::string(claim.status().message()).find("claims"), std::string::npos)
      << claim.status();
}

}  // namespace
}  // namespace sentier
