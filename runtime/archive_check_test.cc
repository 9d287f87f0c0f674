// Tests of CheckArchive on archives written here byte by byte: sound ones (plain and zip64) pass;
// truncations, offsets and sizes that point outside the file, stored entries whose two sizes
// disagree and zip-bomb-like size claims are refused with a reason.
#include "runtime/archive_check.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace sentier {
namespace {

void Put(std::string* s, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

struct Entry {
  std::string name;
  std::string data;
  uint16_t method = 0;
  uint64_t claimed_uncompressed = ~uint64_t{0};  // default: data.size()
};

// A zip archive as LibTorch's writer lays it out: local header + data per entry, then the
// central directory and the end record (with zip64 records when `zip64`).
std::string MakeZip(const std::vector<Entry>& entries, bool zip64 = false) {
  std::string z, cd;
  for (const Entry& e : entries) {
    uint64_t local = z.size();
    uint64_t uncomp = e.claimed_uncompressed == ~uint64_t{0} ? e.data.size() : e.claimed_uncompressed;
    Put(&z, 0x04034b50, 4);
    Put(&z, 20, 2);
    Put(&z, 0, 2);
    Put(&z, e.method, 2);
    Put(&z, 0, 4);  // time, date
    Put(&z, 0, 4);  // crc (not checked)
    Put(&z, e.data.size(), 4);
    Put(&z, uncomp, 4);
    Put(&z, e.name.size(), 2);
    Put(&z, 0, 2);
    z += e.name;
    z += e.data;
    Put(&cd, 0x02014b50, 4);
    Put(&cd, 20, 2);
    Put(&cd, 20, 2);
    Put(&cd, 0, 2);
    Put(&cd, e.method, 2);
    Put(&cd, 0, 4);
    Put(&cd, 0, 4);
    std::string extra;
    if (zip64) {
      Put(&cd, 0xFFFFFFFF, 4);
      Put(&cd, 0xFFFFFFFF, 4);
      Put(&extra, 0x0001, 2);
      Put(&extra, 24, 2);
      Put(&extra, uncomp, 8);
      Put(&extra, e.data.size(), 8);
      Put(&extra, local, 8);
    } else {
      Put(&cd, e.data.size(), 4);
      Put(&cd, uncomp, 4);
    }
    Put(&cd, e.name.size(), 2);
    Put(&cd, extra.size(), 2);
    Put(&cd, 0, 2);
    Put(&cd, 0, 2);
    Put(&cd, 0, 2);
    Put(&cd, 0, 4);
    Put(&cd, zip64 ? 0xFFFFFFFF : local, 4);
    cd += e.name;
    cd += extra;
  }
  uint64_t cd_offset = z.size();
  z += cd;
  if (zip64) {
    uint64_t z64 = z.size();
    Put(&z, 0x06064b50, 4);
    Put(&z, 44, 8);
    Put(&z, 45, 2);
    Put(&z, 45, 2);
    Put(&z, 0, 4);
    Put(&z, 0, 4);
    Put(&z, entries.size(), 8);
    Put(&z, entries.size(), 8);
    Put(&z, cd.size(), 8);
    Put(&z, cd_offset, 8);
    Put(&z, 0x07064b50, 4);
    Put(&z, 0, 4);
    Put(&z, z64, 8);
    Put(&z, 1, 4);
  }
  Put(&z, 0x06054b50, 4);
  Put(&z, 0, 2);
  Put(&z, 0, 2);
  Put(&z, zip64 ? 0xFFFF : entries.size(), 2);
  Put(&z, zip64 ? 0xFFFF : entries.size(), 2);
  Put(&z, zip64 ? 0xFFFFFFFF : cd.size(), 4);
  Put(&z, zip64 ? 0xFFFFFFFF : cd_offset, 4);
  Put(&z, 0, 2);
  return z;
}

// A pickle as LibTorch writes one: PROTO 2, a string, BINPUT, an int, TUPLE2, STOP.
const std::string kPickle = std::string("\x80\x02X\x05\x00\x00\x00helloq\x00K\x07\x86.", 18);
const std::vector<Entry> kEntries = {{"archive/data.pkl", kPickle},
                                     {"archive/data/0", std::string(4096, '\0')},
                                     {"archive/version", "3\n"}};

TEST(ArchiveCheckTest, SoundArchivesPass) {
  EXPECT_TRUE(CheckArchive(MakeZip(kEntries)).ok()) << CheckArchive(MakeZip(kEntries));
  EXPECT_TRUE(CheckArchive(MakeZip(kEntries, /*zip64=*/true)).ok())
      << CheckArchive(MakeZip(kEntries, true));
  EXPECT_TRUE(CheckArchive(MakeZip({})).ok());
}

TEST(ArchiveCheckTest, EveryTruncationIsRefused) {
  for (bool zip64 : {false, true}) {
    std::string z = MakeZip(kEntries, zip64);
    for (size_t n = 0; n < z.size(); ++n) {
      absl::Status st = CheckArchive(absl::string_view(z).substr(0, n));
      EXPECT_FALSE(st.ok()) << "prefix of " << n << " bytes passed (zip64 " << zip64 << ")";
      EXPECT_TRUE(absl::IsInvalidArgument(st));
    }
  }
}

TEST(ArchiveCheckTest, RandomBytesAndEmptyInputAreRefused) {
  EXPECT_FALSE(CheckArchive("").ok());
  std::string junk;
  uint64_t x = 88172645463325252ull;
  for (int i = 0; i < 5000; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    junk.push_back(static_cast<char>(x));
  }
  EXPECT_FALSE(CheckArchive(junk).ok());
}

TEST(ArchiveCheckTest, StoredEntryClaimingMoreThanItStoresIsRefused) {
  std::vector<Entry> bomb = kEntries;
  bomb[0].claimed_uncompressed = 0xFFFFFFF0;  // the zip-bomb-like archive of the hostile test
  absl::Status st = CheckArchive(MakeZip(bomb));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'archive/data.pkl' is stored but claims 4294967280 bytes"),
            std::string::npos) << st;
}

TEST(ArchiveCheckTest, DeflatedEntriesBeyondTheLimitAreRefused) {
  std::vector<Entry> deflated = {{"archive/data.pkl", std::string(64, 'x'), 8, 1 << 20}};
  EXPECT_TRUE(CheckArchive(MakeZip(deflated), /*max_uncompressed_bytes=*/int64_t{2} << 20).ok());
  absl::Status st = CheckArchive(MakeZip(deflated), /*max_uncompressed_bytes=*/int64_t{1} << 19);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("claim more than 524288 bytes uncompressed"), std::string::npos) << st;
  // The limit is on the sum, not only on each entry.
  std::vector<Entry> two = {{"a", "x", 8, 300000}, {"b", "y", 8, 300000}};
  EXPECT_FALSE(CheckArchive(MakeZip(two), int64_t{1} << 19).ok());
  std::vector<Entry> other = {{"a", "x", 12}};  // bzip2: LibTorch reads stored or deflated only
  EXPECT_FALSE(CheckArchive(MakeZip(other)).ok());
}

// Patches a little-endian field of `n` bytes at `at`.
std::string Patched(std::string z, size_t at, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) z[at + i] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return z;
}

TEST(ArchiveCheckTest, OffsetsAndSizesOutsideTheFileAreRefused) {
  std::string z = MakeZip(kEntries);
  size_t eocd = z.size() - 22;
  size_t cd = z.find(std::string("PK\x01\x02", 4));
  ASSERT_NE(cd, std::string::npos);
  const std::vector<std::pair<const char*, std::string>> bad = {
      {"central directory offset past the end", Patched(z, eocd + 16, z.size() + 10, 4)},
      {"central directory size past the end", Patched(z, eocd + 12, 1 << 20, 4)},
      {"more entries than the directory holds", Patched(z, eocd + 10, 60000, 2)},
      {"local header offset past the directory", Patched(z, cd + 42, cd + 4, 4)},
      {"stored size running into the directory", Patched(Patched(z, cd + 20, 1 << 20, 4), cd + 24, 1 << 20, 4)},
      {"name length past the directory", Patched(z, cd + 28, 60000, 2)},
      {"comment length past the end", Patched(z, eocd + 20, 100, 2)},
      {"multi-disk", Patched(z, eocd + 4, 1, 2)},
      {"zip64 markers without zip64 records", Patched(z, eocd + 16, 0xFFFFFFFF, 4)},
  };
  for (const auto& [what, bytes] : bad) {
    absl::Status st = CheckArchive(bytes);
    EXPECT_FALSE(st.ok()) << what;
    EXPECT_NE(st.message().find("not a well-formed archive"), std::string::npos) << what << ": " << st;
  }
  std::string z64 = MakeZip(kEntries, true);
  size_t locator = z64.size() - 22 - 20;
  EXPECT_FALSE(CheckArchive(Patched(z64, locator + 8, 3, 8)).ok()) << "zip64 locator pointing elsewhere";
}

// Stored pickles are walked opcode by opcode: a string that claims more bytes than the pickle
// holds (LibTorch would reserve what it claims first), an unknown opcode or a missing STOP are
// refused; other entries are not read as pickles.
TEST(ArchiveCheckTest, PicklesWhoseArgumentsRunPastTheirEndAreRefused) {
  const std::vector<std::pair<const char*, std::string>> bad = {
      {"4 GiB string", std::string("\x80\x02X\xff\xff\xff\xff" "ab.", 10)},
      {"8-byte length", std::string("\x80\x04\x8d\x00\x00\x00\x00\x01\x00\x00\x00.", 12)},
      {"short bytes past the end", std::string("\x80\x02" "C\x09" "abc.", 8)},
      {"frame larger than the pickle", std::string("\x80\x04\x95\x00\x10\x00\x00\x00\x00\x00\x00N.", 13)},
      {"unknown opcode", std::string("\x80\x02\xff.", 4)},
      {"no STOP", std::string("\x80\x02N", 3)},
      {"unterminated GLOBAL", std::string("\x80\x02" "ctorch\nTensor", 15)},
      {"memo index far ahead (LONG_BINPUT)", std::string("\x80\x02Nr\x01qto.", 9)},
      {"memo index one ahead (BINPUT)", std::string("\x80\x02Nq\x01.", 6)},
      {"GET of an entry never put", std::string("\x80\x02Nq\x00h\x01.", 8)},
      {"text PUT far ahead", std::string("\x80\x02Np99\n.", 8)},
      {"TUPLE2 on an empty stack", std::string("\x80\x02\x86.", 4)},
      {"TUPLE without a MARK", std::string("\x80\x02Nt.", 5)},
      {"APPENDS without a MARK", std::string("\x80\x02]Ne.", 6)},
      {"APPENDS with no list below the MARK", std::string("\x80\x02(Ne.", 6)},
      {"STOP on an empty stack", std::string("\x80\x02.", 3)},
      {"PUT on an empty stack", std::string("\x80\x02q\x00N.", 6)},
  };
  for (const auto& [what, pickle] : bad) {
    // LibTorch's zip reader finds names case-insensitively: "data.pKl" is read as data.pkl.
    for (const char* name : {"archive/data.pkl", "archive/data.pKl"}) {
      std::vector<Entry> e = {{name, pickle}, {"archive/version", "3\n"}};
      absl::Status st = CheckArchive(MakeZip(e));
      EXPECT_FALSE(st.ok()) << what << " in " << name;
      EXPECT_NE(st.message().find(absl::StrCat("pickle '", name, "'")), std::string::npos) << what << ": " << st;
    }
  }
  std::vector<Entry> good = {{"archive/data.pkl", std::string("\x80\x02" "ctorch\nTensor\nq\x00N.", 20)},
                             {"archive/data/0", std::string("X\xff\xff\xff\xff", 5)}};
  EXPECT_TRUE(CheckArchive(MakeZip(good)).ok()) << CheckArchive(MakeZip(good));
  // Memo entries put in order, overwritten, memoized and read back are fine.
  std::vector<Entry> memo = {{"archive/data.pkl",
                              std::string("\x80\x04Nq\x00Nq\x01Nq\x00\x94h\x02j\x01\x00\x00\x00\x86.", 21)}};
  EXPECT_TRUE(CheckArchive(MakeZip(memo)).ok()) << CheckArchive(MakeZip(memo));
  // Marks used as a pickler uses them: a tuple of two, a list filled by APPENDS, a dict by SETITEMS.
  std::vector<Entry> marks = {{"archive/data.pkl",
                               std::string("\x80\x02(NNt](NNe}(NNu\x87.", 18)}};
  EXPECT_TRUE(CheckArchive(MakeZip(marks)).ok()) << CheckArchive(MakeZip(marks));
}

// Every single-byte change of a sound archive is either still sound or refused; none may read
// outside the buffer (ASan builds of this test would catch it).
TEST(ArchiveCheckTest, SingleByteChangesNeverReadOutside) {
  for (bool zip64 : {false, true}) {
    std::string z = MakeZip(kEntries, zip64);
    int refused = 0;
    for (size_t at = 0; at < z.size(); ++at) {
      for (int v : {0x00, 0xFF, 0x7F}) {
        std::string m = z;
        m[at] = static_cast<char>(v);
        refused += !CheckArchive(m).ok();
      }
    }
    EXPECT_GT(refused, 0);
  }
}

}  // namespace
}  // namespace sentier
