// archive_check.cc — see the header. Zip layout per PKWARE's APPNOTE: end-of-central-directory
// record (and its zip64 form with a locator in front), central directory headers, local headers.
#include "runtime/archive_check.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace sentier {
namespace {

constexpr uint32_t kEocdSig = 0x06054b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;
constexpr uint32_t kZip64EocdSig = 0x06064b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kLocalSig = 0x04034b50;
constexpr size_t kEocdSize = 22, kLocatorSize = 20, kZip64EocdSize = 56, kCentralSize = 46,
                 kLocalSize = 30;

// Little-endian readers; the caller has checked the bounds.
uint64_t Le(absl::string_view b, size_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + i]);
  return v;
}

absl::Status Bad(const std::string& what, uint64_t at) {
  return absl::InvalidArgumentError(absl::StrCat("not a well-formed archive: ", what, " (at byte ", at, ")"));
}

// Fits: [at, at + n) lies inside [0, limit).
bool Fits(uint64_t at, uint64_t n, uint64_t limit) { return at <= limit && n <= limit - at; }

// StackEffect: the pickle machine's stack after opcode `op`, as Python's unpickler defines it:
// `depth` items in all, `marks` the depths at which MARKs were set; an opcode may only use items
// above the innermost mark. False when the opcode would take more than is there (LibTorch's
// unpickler pops without looking: a TUPLE with no MARK crashed it).
bool StackEffect(unsigned char op, uint64_t* depth, std::vector<uint64_t>* marks) {
  const uint64_t floor = marks->empty() ? 0 : marks->back();
  const uint64_t above = *depth - floor;
  auto need = [&](uint64_t k, int64_t delta) {
    if (above < k) return false;
    *depth = static_cast<uint64_t>(static_cast<int64_t>(*depth) + delta);
    return true;
  };
  auto to_mark = [&]() {  // pops everything above the innermost mark, and the mark
    if (marks->empty()) return false;
    *depth = marks->back();
    marks->pop_back();
    return true;
  };
  switch (op) {
    case 0x80: case 0x95:  // PROTO, FRAME
      return true;
    case '(':  // MARK
      marks->push_back(*depth);
      return true;
    case 't': case 'l': case 'd': case 0x91: case 'o': case 'i':  // TUPLE LIST DICT FROZENSET OBJ INST
      if (!to_mark()) return false;
      ++*depth;
      return true;
    case 'e': case 'u': case 0x90: {  // APPENDS SETITEMS ADDITEMS: into the item below the mark
      if (marks->empty()) return false;
      uint64_t below = marks->size() >= 2 ? (*marks)[marks->size() - 2] : 0;
      if (marks->back() <= below) return false;
      return to_mark();
    }
    case '1':  // POP_MARK
      return to_mark();
    case 'q': case 'r': case 'p': case 0x94: case 0x98: case 0x85: case 'Q':
      return need(1, 0);  // the PUTs, READONLY_BUFFER, TUPLE1, BINPERSID
    case '0':
      return need(1, -1);  // POP
    case '2':
      return need(1, 1);  // DUP
    case 0x86: case 'a': case 'b': case 'R': case 0x81: case 0x93:
      return need(2, -1);  // TUPLE2 APPEND BUILD REDUCE NEWOBJ STACK_GLOBAL
    case 0x87: case 's': case 0x92:
      return need(3, -2);  // TUPLE3 SETITEM NEWOBJ_EX
    case '.':
      return above >= 1;  // STOP returns the top item
    default:
      return need(0, 1);  // everything else pushes one item
  }
}

// PickleWalk: CheckPickle's walk over one pickle's opcodes (protocols 0-5). It checks that every
// length-prefixed argument (strings, bytes, longs, frames) fits in what is left of the record:
// LibTorch's unpickler reserves the length a string claims before reading it (4 GiB for a 1 KiB
// file). Unknown opcodes are refused (LibTorch's unpickler refuses them too). Reaching the end
// without STOP is refused.
class PickleWalk {
 public:
  PickleWalk(absl::string_view p, const std::string& name, uint64_t base)
      : p_(p), n_(p.size()), name_(name), base_(base) {}

  absl::Status Run();

 private:
  enum class Argument { kFits, kBad, kUnknownOpcode };

  // Skips the argument of `op` (all opcodes but STOP), checking it on the way.
  Argument SkipArgument(unsigned char op);
  // Skips a length-prefixed payload whose length field has `width` bytes.
  bool Payload(int width);
  bool Line();  // a newline-terminated argument (protocol 0 opcodes)
  bool Fixed(uint64_t width);
  // The memo: a pickler numbers its entries 0, 1, 2, ...; LibTorch's unpickler sizes its memo
  // table by the index it reads (a 4-byte index asked for 30 GB). A PUT may name an existing
  // entry or the next one, a GET only an existing one.
  bool Put(uint64_t id);
  bool TextId(uint64_t* id);  // the decimal argument of PUT / GET
  // The index argument of BINPUT / LONG_BINPUT / BINGET / LONG_BINGET, `width` bytes, just read.
  uint64_t LastIndex(int width) const { return Le(p_, at_ - width, width); }
  absl::Status Fail(const std::string& what) const {
    return Bad(absl::StrCat("pickle '", name_, "': ", what), base_ + at_);
  }

  absl::string_view p_;
  const uint64_t n_;
  const std::string& name_;
  const uint64_t base_;
  uint64_t at_ = 0;
  uint64_t memo_ = 0;
  uint64_t depth_ = 0;
  std::vector<uint64_t> marks_;
};

absl::Status PickleWalk::Run() {
  while (at_ < n_) {
    unsigned char op = static_cast<unsigned char>(p_[at_++]);
    if (op == '.') {  // STOP
      if (!StackEffect(op, &depth_, &marks_)) return Fail("STOP with an empty stack");
      return absl::OkStatus();
    }
    switch (SkipArgument(op)) {
      case Argument::kFits:
        break;
      case Argument::kBad:
        return Fail(absl::StrCat("the argument of opcode 0x", absl::Hex(op),
                                 " runs past the end or names a memo entry out of order"));
      case Argument::kUnknownOpcode:
        --at_;
        return Fail(absl::StrCat("unknown opcode 0x", absl::Hex(op)));
    }
    if (!StackEffect(op, &depth_, &marks_)) {
      return Fail(absl::StrCat("opcode 0x", absl::Hex(op), " needs stack items or a mark that are not there"));
    }
  }
  return Fail("no STOP opcode");
}

// The opcode table: each opcode's argument.
PickleWalk::Argument PickleWalk::SkipArgument(unsigned char op) {
  uint64_t id = 0;
  bool ok = true;
  switch (op) {
    case 'X': case 'B': case 'T': case 0x8b:  // BINUNICODE, BINBYTES, BINSTRING, LONG4
      ok = Payload(4);
      break;
    case 0x8c: case 'C': case 'U': case 0x8a:  // SHORT_BINUNICODE, SHORT_BINBYTES, SHORT_BINSTRING, LONG1
      ok = Payload(1);
      break;
    case 0x8d: case 0x8e: case 0x96:  // BINUNICODE8, BINBYTES8, BYTEARRAY8
      ok = Payload(8);
      break;
    case 0x95:  // FRAME: an 8-byte frame size, then the opcodes of the frame
      ok = Fixed(8) && Le(p_, at_ - 8, 8) <= n_ - at_;
      break;
    case 0x80: case 'K': case 0x82:  // PROTO BININT1 EXT1
      ok = Fixed(1);
      break;
    case 'M': case 0x83:  // BININT2 EXT2
      ok = Fixed(2);
      break;
    case 'J': case 0x84:  // BININT EXT4
      ok = Fixed(4);
      break;
    case 'q': case 'r':  // BINPUT, LONG_BINPUT
      ok = Fixed(op == 'q' ? 1 : 4) && Put(LastIndex(op == 'q' ? 1 : 4));
      break;
    case 'h': case 'j':  // BINGET, LONG_BINGET
      ok = Fixed(op == 'h' ? 1 : 4) && LastIndex(op == 'h' ? 1 : 4) < memo_;
      break;
    case 'p':  // PUT
      ok = TextId(&id) && Put(id);
      break;
    case 'g':  // GET
      ok = TextId(&id) && id < memo_;
      break;
    case 0x94:  // MEMOIZE
      ++memo_;
      break;
    case 'G':  // BINFLOAT
      ok = Fixed(8);
      break;
    case 'I': case 'L': case 'F': case 'S': case 'V': case 'P':
      ok = Line();
      break;
    case 'c': case 'i':  // GLOBAL, INST: module and name lines
      ok = Line() && Line();
      break;
    case '(': case '0': case '1': case '2': case 'N': case 0x88: case 0x89: case 't':
    case 0x85: case 0x86: case 0x87: case ')': case ']': case 'a': case 'e': case 'l':
    case '}': case 'd': case 's': case 'u': case 'b': case 'R': case 0x81: case 0x92:
    case 'o': case 'Q': case 0x93: case 0x8f: case 0x90: case 0x91: case 0x97:
    case 0x98:
      break;
    default:
      return Argument::kUnknownOpcode;
  }
  return ok ? Argument::kFits : Argument::kBad;
}

bool PickleWalk::Payload(int width) {
  if (!Fits(at_, width, n_)) return false;
  uint64_t len = Le(p_, at_, width);
  at_ += width;
  if (!Fits(at_, len, n_)) return false;
  at_ += len;
  return true;
}

bool PickleWalk::Line() {
  size_t nl = p_.find('\n', at_);
  if (nl == absl::string_view::npos) return false;
  at_ = nl + 1;
  return true;
}

bool PickleWalk::Fixed(uint64_t width) {
  if (!Fits(at_, width, n_)) return false;
  at_ += width;
  return true;
}

bool PickleWalk::Put(uint64_t id) {
  if (id > memo_) return false;
  if (id == memo_) ++memo_;
  return true;
}

bool PickleWalk::TextId(uint64_t* id) {
  size_t nl = p_.find('\n', at_);
  if (nl == absl::string_view::npos || nl == at_ || nl - at_ > 18) return false;
  uint64_t v = 0;
  for (size_t k = at_; k < nl; ++k) {
    if (p_[k] < '0' || p_[k] > '9') return false;
    v = v * 10 + static_cast<uint64_t>(p_[k] - '0');
  }
  *id = v;
  at_ = nl + 1;
  return true;
}

// CheckPickle: the pickle `p`, entry `name` of the archive, which starts at byte `base` of it.
absl::Status CheckPickle(absl::string_view p, const std::string& name, uint64_t base) {
  return PickleWalk(p, name, base).Run();
}

// Where the central directory lies, from the end-of-central-directory record (or its zip64 form).
struct Directory {
  uint64_t entries = 0;
  uint64_t size = 0;
  uint64_t offset = 0;
  uint64_t limit = 0;  // the directory ends before the records that describe it
};

// The offset of the end-of-central-directory record: the last one, within the last 64 KiB + 22
// bytes.
absl::StatusOr<uint64_t> FindEndRecord(absl::string_view b) {
  const uint64_t size = b.size();
  if (size < kEocdSize) return Bad(absl::StrCat("only ", size, " bytes"), 0);
  uint64_t lowest = size > kEocdSize + 0xFFFF ? size - kEocdSize - 0xFFFF : 0;
  for (uint64_t at = size - kEocdSize + 1; at-- > lowest;) {
    if (Le(b, at, 4) == kEocdSig) return at;
  }
  return Bad("no end-of-central-directory record", size);
}

// The zip64 end-of-central-directory record that the locator at `loc` points at.
absl::Status ReadZip64EndRecord(absl::string_view b, uint64_t loc, Directory* dir) {
  uint64_t z = Le(b, loc + 8, 8);
  if (!Fits(z, kZip64EocdSize, loc) || Le(b, z, 4) != kZip64EocdSig) {
    return Bad("zip64 locator points at no zip64 end-of-central-directory record", loc);
  }
  uint64_t record = Le(b, z + 4, 8);
  if (record < kZip64EocdSize - 12 || !Fits(z + 12, record, loc)) {
    return Bad("zip64 end-of-central-directory record of a wrong size", z);
  }
  if (Le(b, z + 16, 4) != 0 || Le(b, z + 20, 4) != 0) return Bad("multi-disk archive", z);
  dir->entries = Le(b, z + 32, 8);
  dir->size = Le(b, z + 40, 8);
  dir->offset = Le(b, z + 48, 8);
  dir->limit = z;
  return absl::OkStatus();
}

// The central directory, checked to lie inside the file with room for its entries.
absl::StatusOr<Directory> ReadDirectory(absl::string_view b) {
  const uint64_t size = b.size();
  absl::StatusOr<uint64_t> found = FindEndRecord(b);
  if (!found.ok()) return found.status();
  const uint64_t eocd = *found;
  uint64_t comment = Le(b, eocd + 20, 2);
  if (!Fits(eocd + kEocdSize, comment, size)) return Bad("archive comment runs past the end", eocd);
  if (Le(b, eocd + 4, 2) != 0 || Le(b, eocd + 6, 2) != 0) return Bad("multi-disk archive", eocd);
  Directory dir;
  dir.entries = Le(b, eocd + 10, 2);
  dir.size = Le(b, eocd + 12, 4);
  dir.offset = Le(b, eocd + 16, 4);
  dir.limit = eocd;
  if (eocd >= kLocatorSize && Le(b, eocd - kLocatorSize, 4) == kZip64LocatorSig) {
    absl::Status z = ReadZip64EndRecord(b, eocd - kLocatorSize, &dir);
    if (!z.ok()) return z;
  } else if (dir.entries == 0xFFFF || dir.size == 0xFFFFFFFF || dir.offset == 0xFFFFFFFF) {
    return Bad("zip64 sizes without a zip64 record", eocd);
  }
  if (!Fits(dir.offset, dir.size, dir.limit)) {
    return Bad(absl::StrCat("central directory of ", dir.size, " bytes at ", dir.offset,
                            " runs past its end record"), eocd);
  }
  if (dir.entries > dir.size / kCentralSize) return Bad(absl::StrCat(dir.entries, " entries cannot fit"), eocd);
  return dir;
}

// One central directory entry, with its zip64 sizes applied.
struct Entry {
  std::string name;
  uint64_t method = 0;
  uint64_t comp = 0;
  uint64_t uncomp = 0;
  uint64_t local = 0;  // the offset of its local header
  uint64_t next = 0;   // the offset of the next central directory entry
};

// zip64 extended information: the 64-bit fields, in this order, for those marked 0xFFFFFFFF.
// `at` is the entry's central directory header, `e` its extra field of `extra_len` bytes.
absl::Status ApplyZip64Sizes(absl::string_view b, uint64_t at, uint64_t e, uint64_t extra_len, Entry* entry) {
  const uint64_t e_end = e + extra_len;
  while (e + 4 <= e_end) {
    uint64_t id = Le(b, e, 2), len = Le(b, e + 2, 2);
    if (e + 4 + len > e_end) break;
    if (id == 0x0001) {
      uint64_t f = e + 4, f_end = e + 4 + len;
      auto take = [&](uint64_t* field) {
        if (*field != 0xFFFFFFFF) return true;
        if (f + 8 > f_end) return false;
        *field = Le(b, f, 8);
        f += 8;
        return true;
      };
      if (!take(&entry->uncomp) || !take(&entry->comp) || !take(&entry->local)) {
        return Bad(absl::StrCat("entry '", entry->name, "': truncated zip64 field"), e);
      }
      return absl::OkStatus();
    }
    e += 4 + len;
  }
  return Bad(absl::StrCat("entry '", entry->name, "': 32-bit size marker without zip64 field"), at);
}

// Central directory entry `k`, at `at`.
absl::StatusOr<Entry> ReadEntry(absl::string_view b, uint64_t at, uint64_t cd_end, uint64_t k) {
  if (!Fits(at, kCentralSize, cd_end) || Le(b, at, 4) != kCentralSig) {
    return Bad(absl::StrCat("central directory entry ", k, " missing"), at);
  }
  Entry entry;
  entry.method = Le(b, at + 10, 2);
  entry.comp = Le(b, at + 20, 4);
  entry.uncomp = Le(b, at + 24, 4);
  uint64_t name_len = Le(b, at + 28, 2);
  uint64_t extra_len = Le(b, at + 30, 2);
  uint64_t comment_len = Le(b, at + 32, 2);
  entry.local = Le(b, at + 42, 4);
  entry.next = at + kCentralSize + name_len + extra_len + comment_len;
  if (entry.next > cd_end) return Bad(absl::StrCat("central directory entry ", k, " runs past the directory"), at);
  entry.name = std::string(b.substr(at + kCentralSize, name_len));
  if (entry.uncomp == 0xFFFFFFFF || entry.comp == 0xFFFFFFFF || entry.local == 0xFFFFFFFF) {
    absl::Status z = ApplyZip64Sizes(b, at, at + kCentralSize + name_len, extra_len, &entry);
    if (!z.ok()) return z;
  }
  return entry;
}

// The offset of the entry's data: a stored or deflated entry whose local header and data lie
// before the central directory at `cd_offset`. `at` is its central directory header.
absl::StatusOr<uint64_t> LocateData(absl::string_view b, const Entry& entry, uint64_t at, uint64_t cd_offset) {
  const std::string& name = entry.name;
  if (entry.method != 0 && entry.method != 8) {
    return Bad(absl::StrCat("entry '", name, "': compression method ", entry.method, " (only stored or deflated)"),
               at);
  }
  if (entry.method == 0 && entry.comp != entry.uncomp) {
    return Bad(absl::StrCat("entry '", name, "' is stored but claims ", entry.uncomp,
                            " bytes uncompressed and ", entry.comp, " stored"), at);
  }
  const uint64_t local = entry.local;
  if (!Fits(local, kLocalSize, cd_offset) || Le(b, local, 4) != kLocalSig) {
    return Bad(absl::StrCat("entry '", name, "': no local header at ", local), at);
  }
  uint64_t data = local + kLocalSize + Le(b, local + 26, 2) + Le(b, local + 28, 2);
  if (!Fits(data, entry.comp, cd_offset)) {
    return Bad(absl::StrCat("entry '", name, "': ", entry.comp, " bytes of data at ", data,
                            " run into the central directory"), local);
  }
  return data;
}

// Adds the entry's uncompressed size to `*total`, which must stay within the limit.
absl::Status CountUncompressed(const Entry& entry, uint64_t at, int64_t max_uncompressed_bytes, uint64_t* total) {
  if (entry.uncomp > static_cast<uint64_t>(max_uncompressed_bytes) ||
      *total + entry.uncomp > static_cast<uint64_t>(max_uncompressed_bytes)) {
    return Bad(absl::StrCat("entries claim more than ", max_uncompressed_bytes,
                            " bytes uncompressed (entry '", entry.name, "': ", entry.uncomp, ")"), at);
  }
  *total += entry.uncomp;
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckArchive(absl::string_view b, int64_t max_uncompressed_bytes) {
  absl::StatusOr<Directory> dir = ReadDirectory(b);
  if (!dir.ok()) return dir.status();
  uint64_t at = dir->offset;
  const uint64_t cd_end = dir->offset + dir->size;
  uint64_t total_uncompressed = 0;
  for (uint64_t k = 0; k < dir->entries; ++k) {
    absl::StatusOr<Entry> entry = ReadEntry(b, at, cd_end, k);
    if (!entry.ok()) return entry.status();
    absl::StatusOr<uint64_t> data = LocateData(b, *entry, at, dir->offset);
    if (!data.ok()) return data.status();
    absl::Status counted = CountUncompressed(*entry, at, max_uncompressed_bytes, &total_uncompressed);
    if (!counted.ok()) return counted;
    // Pickles LibTorch will unpickle: stored ones are checked in place (LibTorch writes them
    // stored; a deflated pickle cannot be read without inflating it and is left to LibTorch).
    // miniz finds names case-insensitively, so "data.PKL" is read as "data.pkl".
    if (entry->method == 0 && absl::EndsWithIgnoreCase(entry->name, ".pkl")) {
      absl::Status pk = CheckPickle(b.substr(*data, entry->comp), entry->name, *data);
      if (!pk.ok()) return pk;
    }
    at = entry->next;
  }
  return absl::OkStatus();
}

}  // namespace sentier
