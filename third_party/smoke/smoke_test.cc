// Dependency smoke test: one trivial use of every third-party library.
#include <openssl/evp.h>
#include <openssl/sha.h>

#include <string>

#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/testing/file_check.h>
#include <torch/script.h>
#include <torch/torch.h>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "re2/re2.h"

DEFINE_int32(smoke_flag, 7, "smoke test flag");

namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError(absl::StrCat("odd: ", x));
  return x / 2;
}

TEST(SmokeTest, Torch) {
  EXPECT_EQ(torch::ones(2).sum().item<float>(), 2.0f);
}

TEST(SmokeTest, TorchJitIrParserAndFileCheck) {
  auto graph = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(R"IR(
graph(%a : Tensor):
  %b : Tensor = aten::relu(%a)
  return (%b))IR",
                      graph.get());
  torch::jit::testing::FileCheck().check("aten::relu")->run(*graph);
}

TEST(SmokeTest, Absl) {
  EXPECT_EQ(*Half(4), 2);
  EXPECT_FALSE(Half(3).ok());
  absl::flat_hash_map<std::string, int> m = {{"a", 1}};
  EXPECT_EQ(m["a"], 1);
  EXPECT_THAT(absl::StrSplit("a,b", ','), testing::ElementsAre("a", "b"));
  EXPECT_EQ(absl::StrFormat("%d-%s", 1, "x"), "1-x");
  absl::Mutex mu;
  absl::MutexLock lock(&mu);
  EXPECT_EQ(absl::ToInt64Milliseconds(absl::Seconds(1)), 1000);
}

TEST(SmokeTest, GflagsGlog) {
  EXPECT_EQ(FLAGS_smoke_flag, 7);
  LOG(INFO) << "glog works";
  CHECK_EQ(1 + 1, 2);
}

TEST(SmokeTest, Re2) { EXPECT_TRUE(RE2::FullMatch("abc123", "[a-z]+\\d+")); }

TEST(SmokeTest, Json) {
  auto j = nlohmann::json::parse(R"({"x": [1, 2]})");
  EXPECT_EQ(j["x"][1].get<int>(), 2);
}

TEST(SmokeTest, Httplib) {
  httplib::Request req;
  req.set_header("A", "b");
  EXPECT_EQ(req.get_header_value("A"), "b");
  httplib::Client client("http://127.0.0.1:1");  // constructing only
  EXPECT_TRUE(client.is_valid());
}

TEST(SmokeTest, OpenSsl) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  unsigned int len = 0;
  ASSERT_EQ(EVP_Digest("abc", 3, digest, &len, EVP_sha256(), nullptr), 1);
  ASSERT_EQ(len, static_cast<unsigned int>(SHA256_DIGEST_LENGTH));
  EXPECT_EQ(digest[0], 0xba);  // sha256("abc") = ba7816bf...
}

}  // namespace
