// Unit tests of Publisher: atomic publication, stale temp clean-up, and rejected re-runs that
// never touch an earlier artifact.
#include "runtime/daemon/publisher.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/file_util.h"

namespace sentier {
namespace {

namespace fs = std::filesystem;

class PublisherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    out_ = fs::path(::testing::TempDir()) /
           (std::string("pub_") +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_TRUE(RemoveTree(out_.string()).ok());
    auto p = Publisher::Create(out_.string());
    ASSERT_TRUE(p.ok()) << p.status();
    pub_ = std::move(*p);
  }
  std::string Stage(const std::string& model, int64_t v, const std::string& body, bool artifact) {
    auto s = pub_->MakeStagingDir(model, v);
    EXPECT_TRUE(s.ok());
    if (artifact) EXPECT_TRUE(WriteFileSynced(*s + "/model.pt", body).ok());
    EXPECT_TRUE(WriteFileSynced(*s + "/report.json", "{\"b\":\"" + body + "\"}").ok());
    return *s;
  }
  std::string Read(const fs::path& p) { return ReadFile(p.string()).value_or("<none>"); }
  std::vector<std::string> Temps() {
    std::vector<std::string> t;
    for (const auto& e : fs::directory_iterator(out_)) {
      if (e.path().filename().string().rfind(".tmp-", 0) == 0) t.push_back(e.path());
    }
    return t;
  }
  fs::path out_;
  std::unique_ptr<Publisher> pub_;
};

TEST_F(PublisherTest, PublishMovesCompleteDirectory) {
  std::string s = Stage("ranker", 1, "v1", true);
  EXPECT_FALSE(fs::exists(out_ / "ranker" / "1"));
  ASSERT_TRUE(pub_->Publish(s, "ranker", 1, false).ok());
  EXPECT_EQ(Read(out_ / "ranker" / "1" / "model.pt"), "v1");
  EXPECT_FALSE(fs::exists(s));
  EXPECT_TRUE(Temps().empty());
}

// The before-rename hook runs once per publication, after the staging directory is complete and
// before the published directory changes (the crash-safety test sleeps there).
TEST_F(PublisherTest, BeforeRenameHookRunsBeforeThePublishedDirectoryChanges) {
  ASSERT_TRUE(pub_->Publish(Stage("ranker", 1, "old", true), "ranker", 1, false).ok());
  std::vector<std::string> seen;
  pub_->set_before_rename([&](const std::string& model, int64_t version) {
    seen.push_back(model + "/" + std::to_string(version) + ":" +
                   Read(out_ / model / std::to_string(version) / "model.pt"));
  });
  ASSERT_TRUE(pub_->Publish(Stage("ranker", 1, "new", true), "ranker", 1, false).ok());
  ASSERT_TRUE(pub_->Publish(Stage("towers", 2, "t2", true), "towers", 2, false).ok());
  EXPECT_EQ(seen, (std::vector<std::string>{"ranker/1:old", "towers/2:<none>"}));
  EXPECT_EQ(Read(out_ / "ranker" / "1" / "model.pt"), "new");
}

TEST_F(PublisherTest, RepublishReplacesAtomically) {
  ASSERT_TRUE(pub_->Publish(Stage("ranker", 1, "old", true), "ranker", 1, false).ok());
  ASSERT_TRUE(pub_->Publish(Stage("ranker", 1, "new", true), "ranker", 1, false).ok());
  EXPECT_EQ(Read(out_ / "ranker" / "1" / "model.pt"), "new");
  EXPECT_TRUE(Temps().empty());
}

TEST_F(PublisherTest, RejectionNeverTouchesEarlierVersions) {
  ASSERT_TRUE(pub_->Publish(Stage("ranker", 1, "good", true), "ranker", 1, false).ok());
  // A rejected new version: its own directory, report only; v1 untouched.
  ASSERT_TRUE(pub_->Publish(Stage("ranker", 2, "bad", false), "ranker", 2, true).ok());
  EXPECT_EQ(Read(out_ / "ranker" / "1" / "model.pt"), "good");
  EXPECT_FALSE(fs::exists(out_ / "ranker" / "2" / "model.pt"));
  EXPECT_TRUE(fs::exists(out_ / "ranker" / "2" / "report.json"));
  // A rejected re-run of v1 keeps the good artifact.
  absl::Status st = pub_->Publish(Stage("ranker", 1, "bad", false), "ranker", 1, true);
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_EQ(Read(out_ / "ranker" / "1" / "model.pt"), "good");
  EXPECT_EQ(Read(out_ / "ranker" / "1" / "report.json"), "{\"b\":\"good\"}");
  EXPECT_TRUE(Temps().empty());
}

TEST_F(PublisherTest, StaleTempsCleanedAtStartup) {
  Stage("ranker", 1, "half", true);  // a crash left this behind
  fs::create_directories(out_ / ".tmp-other-3-99-1" / "x");
  std::ofstream(out_ / ".tmp-file") << "x";
  ASSERT_TRUE(pub_->Publish(Stage("ranker", 2, "ok", true), "ranker", 2, false).ok());
  auto p = Publisher::Create(out_.string());
  ASSERT_TRUE(p.ok());
  auto n = (*p)->CleanStaleTemps();
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 3);
  EXPECT_TRUE(Temps().empty());
  EXPECT_EQ(Read(out_ / "ranker" / "2" / "model.pt"), "ok");
}

// Replicas sharing OUT remove only the staging dirs of the versions they say are stale (those
// whose claim they hold); other entries stay.
TEST_F(PublisherTest, StaleTempsCleanedSelectively) {
  std::string model;
  int64_t version = 0;
  ASSERT_TRUE(Publisher::ParseStagingName(".tmp-ranker-v2-7-12-3", &model, &version));
  EXPECT_EQ(model, "ranker-v2");
  EXPECT_EQ(version, 7);
  EXPECT_FALSE(Publisher::ParseStagingName(".tmp-file", &model, &version));
  EXPECT_FALSE(Publisher::ParseStagingName(".tmp-a-1-x-1", &model, &version));
  EXPECT_FALSE(Publisher::ParseStagingName(".tmp-1-2-3", &model, &version));
  std::string mine = Stage("a-1", 5, "half", true);
  std::string theirs = Stage("a", 1, "live", true);
  std::ofstream(out_ / ".tmp-file") << "x";
  std::vector<std::string> asked;
  auto n = pub_->CleanStaleTemps([&](const std::string& m, int64_t v) {
    asked.push_back(m + "/" + std::to_string(v));
    return m == "a-1" && v == 5;
  });
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 1);
  EXPECT_FALSE(fs::exists(mine));
  EXPECT_TRUE(fs::exists(theirs));
  EXPECT_TRUE(fs::exists(out_ / ".tmp-file"));
  std::sort(asked.begin(), asked.end());
  EXPECT_EQ(asked, (std::vector<std::string>{"a-1/5", "a/1"}));
}

TEST_F(PublisherTest, UnwritableOutputIsAnError) {
  EXPECT_FALSE(Publisher::Create("/proc/sentier_no_such_dir/out").ok());
}

TEST(RemoveTreeTest, RemovesNestedTreesWithoutFollowingLinks) {
  fs::path base = fs::path(::testing::TempDir()) / "remove_tree";
  fs::path keep = fs::path(::testing::TempDir()) / "remove_tree_keep";
  ASSERT_TRUE(RemoveTree(base.string()).ok());
  fs::create_directories(base / "a" / "b");
  fs::create_directories(keep);
  ASSERT_TRUE(WriteFileSynced((base / "a" / "b" / "f").string(), "x").ok());
  ASSERT_TRUE(WriteFileSynced((keep / "g").string(), "y").ok());
  fs::create_directory_symlink(keep, base / "a" / "link");
  ASSERT_TRUE(RemoveTree(base.string()).ok());
  EXPECT_FALSE(fs::exists(base));
  EXPECT_TRUE(fs::exists(keep / "g"));                // the link's target is untouched
  EXPECT_TRUE(RemoveTree(base.string()).ok());        // absent: OK
  ASSERT_TRUE(WriteFileSynced(base.string(), "plain file").ok());
  EXPECT_TRUE(RemoveTree(base.string()).ok());
  EXPECT_FALSE(fs::exists(base));
}

}  // namespace
}  // namespace sentier
