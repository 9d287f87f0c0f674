// Unit tests of RegistryWatcher: driven one poll at a time against temp directories, no sleeps
// (mtimes are set explicitly where a change must be seen).
#include "runtime/daemon/registry_watcher.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "runtime/file_util.h"

namespace sentier {
namespace {

namespace fs = std::filesystem;

class RegistryWatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::path(::testing::TempDir()) /
            (std::string("watcher_") +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    // RemoveTree, not fs::remove_all: an executable that links pip LibTorch 2.x can bind to
    // that library's own copy of the latter, which crashes on a non-empty tree.
    ASSERT_TRUE(RemoveTree(base_.string()).ok());
    root_ = base_ / "reg";
    fs::create_directories(root_);
  }
  void Write(const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
  }
  void AddVersion(const std::string& model, const std::string& v, const std::string& body = "x") {
    Write(root_ / model / v / "model.pt", body);
    Write(root_ / model / v / "inputs.pt", "i");
  }
  std::unique_ptr<RegistryWatcher> Make(int64_t max_bytes = 0) {
    WatcherOptions o;
    o.root = root_.string();
    o.max_model_bytes = max_bytes;
    auto w = RegistryWatcher::Create(o);
    EXPECT_TRUE(w.ok()) << w.status();
    return std::move(*w);
  }
  fs::path base_, root_;
};

TEST_F(RegistryWatcherTest, VersionSettlesAfterOneUnchangedPoll) {
  AddVersion("ranker", "1");
  auto w = Make();
  auto s1 = w->PollOnce();
  ASSERT_TRUE(s1.ok());
  EXPECT_TRUE(s1->models.empty());
  EXPECT_EQ(s1->unsettled, 1);
  auto s2 = w->PollOnce();
  ASSERT_TRUE(s2.ok());
  ASSERT_EQ(s2->models.count("ranker"), 1u);
  ASSERT_EQ(s2->models["ranker"].size(), 1u);
  EXPECT_EQ(s2->models["ranker"][0].version, 1);
  EXPECT_TRUE(s2->models["ranker"][0].refused_reason.empty());
}

TEST_F(RegistryWatcherTest, GrowingFileIsNotTaken) {
  Write(root_ / "ranker" / "1" / "model.pt", "abc");
  auto w = Make();
  ASSERT_TRUE(w->PollOnce().ok());
  Write(root_ / "ranker" / "1" / "model.pt", "abcdef");  // still being written
  auto s = w->PollOnce();
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->models.empty());
  Write(root_ / "ranker" / "1" / "inputs.pt", "i");  // a new file appears
  s = w->PollOnce();
  EXPECT_TRUE(s->models.empty());
  s = w->PollOnce();  // nothing changed since the last poll
  ASSERT_EQ(s->models["ranker"].size(), 1u);
}

TEST_F(RegistryWatcherTest, SameSizeRewriteIsSeenThroughMtime) {
  AddVersion("ranker", "1", "aaaa");
  auto w = Make();
  ASSERT_TRUE(w->PollOnce().ok());
  Write(root_ / "ranker" / "1" / "model.pt", "bbbb");
  struct timespec ts[2] = {{0, UTIME_OMIT}, {12345, 0}};
  ::utimensat(AT_FDCWD, (root_ / "ranker" / "1" / "model.pt").c_str(), ts, 0);
  EXPECT_TRUE(w->PollOnce()->models.empty());
  EXPECT_EQ(w->PollOnce()->models["ranker"].size(), 1u);
}

TEST_F(RegistryWatcherTest, IgnoresBadNames) {
  AddVersion("ranker", "1");
  AddVersion("ranker", "01");       // leading zero
  AddVersion("ranker", "0");        // not positive
  AddVersion("ranker", "tmp-2");    // writer's staging dir
  AddVersion("ranker", "3a");
  AddVersion(".hidden", "1");
  AddVersion("-dash", "1");
  AddVersion("bad name", "1");
  AddVersion("tmp-x", "1");  // valid name: a model called tmp-x
  Write(root_ / "ranker" / "7", "a file, not a directory");
  auto w = Make();
  w->PollOnce().IgnoreError();
  auto s = w->PollOnce();
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->models.size(), 2u);
  ASSERT_EQ(s->models["ranker"].size(), 1u);
  EXPECT_EQ(s->models["ranker"][0].version, 1);
  EXPECT_EQ(s->models.count("tmp-x"), 1u);
}

TEST_F(RegistryWatcherTest, NameRules) {
  int64_t v = 0;
  EXPECT_TRUE(ParseVersionName("12", &v));
  EXPECT_EQ(v, 12);
  EXPECT_FALSE(ParseVersionName("012", &v));
  EXPECT_FALSE(ParseVersionName("-1", &v));
  EXPECT_FALSE(ParseVersionName("99999999999999999999", &v));
  EXPECT_TRUE(IsValidModelName("a.b_c-d9"));
  EXPECT_FALSE(IsValidModelName("a/b"));
  EXPECT_FALSE(IsValidModelName("a\nb"));
  EXPECT_FALSE(IsValidModelName("_a"));
  EXPECT_FALSE(IsValidModelName(""));
}

TEST_F(RegistryWatcherTest, SymlinkEscapingRootIsRefused) {
  Write(base_ / "outside" / "secret.pt", "s");
  Write(base_ / "outside" / "m" / "1" / "model.pt", "s");
  Write(base_ / "outside" / "m" / "1" / "inputs.pt", "s");
  fs::create_directories(root_ / "ranker" / "1");
  fs::create_symlink(base_ / "outside" / "secret.pt", root_ / "ranker" / "1" / "model.pt");
  Write(root_ / "ranker" / "1" / "inputs.pt", "i");
  // A symlink inside the registry is fine.
  AddVersion("ranker", "2");
  fs::create_directories(root_ / "ranker" / "3");
  fs::create_symlink(root_ / "ranker" / "2" / "model.pt", root_ / "ranker" / "3" / "model.pt");
  Write(root_ / "ranker" / "3" / "inputs.pt", "i");
  // Whole model and version directories leading outside are ignored.
  fs::create_directory_symlink(base_ / "outside" / "m", root_ / "escaped");
  fs::create_directory_symlink(base_ / "outside" / "m" / "1", root_ / "ranker" / "4");
  auto w = Make();
  w->PollOnce().IgnoreError();
  auto s = w->PollOnce();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->models.count("escaped"), 0u);
  auto& vs = s->models["ranker"];
  ASSERT_EQ(vs.size(), 3u);
  EXPECT_EQ(vs[0].version, 1);
  EXPECT_NE(vs[0].refused_reason.find("outside the registry"), std::string::npos);
  EXPECT_TRUE(vs[1].refused_reason.empty());
  EXPECT_EQ(vs[2].version, 3);
  EXPECT_TRUE(vs[2].refused_reason.empty());
}

TEST_F(RegistryWatcherTest, FilesAboveMaxBytesAreRefused) {
  AddVersion("big", "1", std::string(1000, 'x'));
  AddVersion("small", "1", "x");
  auto w = Make(/*max_bytes=*/100);
  w->PollOnce().IgnoreError();
  auto s = w->PollOnce();
  ASSERT_TRUE(s.ok());
  EXPECT_NE(s->models["big"][0].refused_reason.find("max_model_bytes"), std::string::npos);
  EXPECT_TRUE(s->models["small"][0].refused_reason.empty());
}

TEST_F(RegistryWatcherTest, ShardsPartitionModels) {
  for (int i = 0; i < 20; ++i) AddVersion("m" + std::to_string(i), "1");
  size_t total = 0;
  for (int shard = 0; shard < 3; ++shard) {
    WatcherOptions o;
    o.root = root_.string();
    o.shard_index = shard;
    o.shard_count = 3;
    auto w = RegistryWatcher::Create(o);
    ASSERT_TRUE(w.ok());
    (*w)->PollOnce().IgnoreError();
    auto s = (*w)->PollOnce();
    for (const auto& [m, vs] : s->models) EXPECT_EQ(ShardOf(m, 3), shard);
    total += s->models.size();
  }
  EXPECT_EQ(total, 20u);
  int i = -1, n = -1;
  EXPECT_TRUE(ParseShard("1/4", &i, &n));
  EXPECT_FALSE(ParseShard("4/4", &i, &n));
  EXPECT_FALSE(ParseShard("x", &i, &n));
}

// A registry of 1,000 models x 3 versions: every version settles on the second poll, in
// order; a third poll with nothing changed sees the same. (Its cost is measured by
// //bench:registry_benchmark, not here.)
TEST_F(RegistryWatcherTest, ThousandModelsThreeVersionsEach) {
  for (int m = 0; m < 1000; ++m) {
    for (int v = 1; v <= 3; ++v) AddVersion("model" + std::to_string(m), std::to_string(v));
  }
  auto w = Make();
  auto s1 = w->PollOnce();
  ASSERT_TRUE(s1.ok());
  EXPECT_EQ(s1->unsettled, 3000);
  for (int poll = 2; poll <= 3; ++poll) {
    auto s = w->PollOnce();
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->unsettled, 0);
    ASSERT_EQ(s->models.size(), 1000u);
    for (const auto& [name, versions] : s->models) {
      ASSERT_EQ(versions.size(), 3u) << name;
      for (int v = 0; v < 3; ++v) {
        EXPECT_EQ(versions[v].version, v + 1);
        EXPECT_TRUE(versions[v].refused_reason.empty());
      }
    }
  }
}

TEST_F(RegistryWatcherTest, UnreadableRootIsAnError) {
  WatcherOptions o;
  o.root = (base_ / "nope").string();
  EXPECT_FALSE(RegistryWatcher::Create(o).ok());
  auto w = Make();
  ASSERT_TRUE(RemoveTree(root_.string()).ok());
  EXPECT_FALSE(w->PollOnce().ok());
}

}  // namespace
}  // namespace sentier
