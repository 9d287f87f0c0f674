// archive_check.cc — see the header. Zip layout per PKWARE's APPNOTE: end-of-central-directory
// record (and its zip64 form with a locator in front), central directory headers, local headers.
#include "runtime/archive_check.h"

#include <algorithm>
#include <string>
#include <vector>

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

// CheckPickle: walks a pickle's opcodes (protocols 0-5) and checks that every length-prefixed
// argument (strings, bytes, longs, frames) fits in what is left of the record. LibTorch's
// unpickler reserves the length a string claims before reading it: 4 GiB for a 1 KiB file.
// Unknown opcodes are refused (LibTorch's unpickler refuses them too). Reaching the end without
// STOP is refused.
absl::Status CheckPickle(absl::string_view p, const std::string& name, uint64_t base) {
  uint64_t at = 0;
  const uint64_t n = p.size();
  auto bad = [&](const std::string& what) {
    return Bad(absl::StrCat("pickle '", name, "': ", what), base + at);
  };
  // Skips a length-prefixed payload whose length field has `width` bytes.
  auto payload = [&](int width) -> bool {
    if (!Fits(at, width, n)) return false;
    uint64_t len = Le(p, at, width);
    at += width;
    if (!Fits(at, len, n)) return false;
    at += len;
    return true;
  };
  auto line = [&]() -> bool {  // newline-terminated argument (protocol 0 opcodes)
    size_t nl = p.find('\n', at);
    if (nl == absl::string_view::npos) return false;
    at = nl + 1;
    return true;
  };
  auto fixed = [&](uint64_t width) -> bool {
    if (!Fits(at, width, n)) return false;
    at += width;
    return true;
  };
  // The memo: a pickler numbers its entries 0, 1, 2, ...; LibTorch's unpickler sizes its memo
  // table by the index it reads (a 4-byte index asked for 30 GB). A PUT may name an existing
  // entry or the next one, a GET only an existing one.
  uint64_t memo = 0;
  auto put = [&](uint64_t id) -> bool {
    if (id > memo) return false;
    if (id == memo) ++memo;
    return true;
  };
  auto text_id = [&](uint64_t* id) -> bool {  // the decimal argument of PUT / GET
    size_t nl = p.find('\n', at);
    if (nl == absl::string_view::npos || nl == at || nl - at > 18) return false;
    uint64_t v = 0;
    for (size_t k = at; k < nl; ++k) {
      if (p[k] < '0' || p[k] > '9') return false;
      v = v * 10 + static_cast<uint64_t>(p[k] - '0');
    }
    *id = v;
    at = nl + 1;
    return true;
  };
  uint64_t id = 0;
  uint64_t depth = 0;
  std::vector<uint64_t> marks;
  while (at < n) {
    unsigned char op = static_cast<unsigned char>(p[at++]);
    bool ok = true;
    switch (op) {
      case '.':  // STOP
        if (!StackEffect(op, &depth, &marks)) return bad("STOP with an empty stack");
        return absl::OkStatus();
      case 'X': case 'B': case 'T': case 0x8b:  // BINUNICODE, BINBYTES, BINSTRING, LONG4
        ok = payload(4);
        break;
      case 0x8c: case 'C': case 'U': case 0x8a:  // SHORT_BINUNICODE, SHORT_BINBYTES, SHORT_BINSTRING, LONG1
        ok = payload(1);
        break;
      case 0x8d: case 0x8e: case 0x96:  // BINUNICODE8, BINBYTES8, BYTEARRAY8
        ok = payload(8);
        break;
      case 0x95:  // FRAME: an 8-byte frame size, then the opcodes of the frame
        ok = fixed(8) && Le(p, at - 8, 8) <= n - at;
        break;
      case 0x80: case 'K': case 0x82:  // PROTO BININT1 EXT1
        ok = fixed(1);
        break;
      case 'M': case 0x83:  // BININT2 EXT2
        ok = fixed(2);
        break;
      case 'J': case 0x84:  // BININT EXT4
        ok = fixed(4);
        break;
      case 'q': case 'r':  // BINPUT, LONG_BINPUT
        ok = fixed(op == 'q' ? 1 : 4) && put(Le(p, at - (op == 'q' ? 1 : 4), op == 'q' ? 1 : 4));
        break;
      case 'h': case 'j':  // BINGET, LONG_BINGET
        ok = fixed(op == 'h' ? 1 : 4) && Le(p, at - (op == 'h' ? 1 : 4), op == 'h' ? 1 : 4) < memo;
        break;
      case 'p':  // PUT
        ok = text_id(&id) && put(id);
        break;
      case 'g':  // GET
        ok = text_id(&id) && id < memo;
        break;
      case 0x94:  // MEMOIZE
        ++memo;
        break;
      case 'G':  // BINFLOAT
        ok = fixed(8);
        break;
      case 'I': case 'L': case 'F': case 'S': case 'V': case 'P':
        ok = line();
        break;
      case 'c': case 'i':  // GLOBAL, INST: module and name lines
        ok = line() && line();
        break;
      case '(': case '0': case '1': case '2': case 'N': case 0x88: case 0x89: case 't':
      case 0x85: case 0x86: case 0x87: case ')': case ']': case 'a': case 'e': case 'l':
      case '}': case 'd': case 's': case 'u': case 'b': case 'R': case 0x81: case 0x92:
      case 'o': case 'Q': case 0x93: case 0x8f: case 0x90: case 0x91: case 0x97:
      case 0x98:
        break;
      default:
        --at;
        return bad(absl::StrCat("unknown opcode 0x", absl::Hex(op)));
    }
    if (!ok) {
      return bad(absl::StrCat("the argument of opcode 0x", absl::Hex(op),
                              " runs past the end or names a memo entry out of order"));
    }
    if (!StackEffect(op, &depth, &marks)) {
      return bad(absl::StrCat("opcode 0x", absl::Hex(op), " needs stack items or a mark that are not there"));
    }
  }
  return bad("no STOP opcode");
}

}  // namespace

absl::Status CheckArchive(absl::string_view b, int64_t max_uncompressed_bytes) {
  const uint64_t size = b.size();
  if (size < kEocdSize) return Bad(absl::StrCat("only ", size, " bytes"), 0);

  // End-of-central-directory record: the last one, within the last 64 KiB + 22 bytes.
  uint64_t eocd = size;
  uint64_t lowest = size > kEocdSize + 0xFFFF ? size - kEocdSize - 0xFFFF : 0;
  for (uint64_t at = size - kEocdSize + 1; at-- > lowest;) {
    if (Le(b, at, 4) == kEocdSig) {
      eocd = at;
      break;
    }
  }
  if (eocd == size) return Bad("no end-of-central-directory record", size);
  uint64_t comment = Le(b, eocd + 20, 2);
  if (!Fits(eocd + kEocdSize, comment, size)) return Bad("archive comment runs past the end", eocd);
  if (Le(b, eocd + 4, 2) != 0 || Le(b, eocd + 6, 2) != 0) return Bad("multi-disk archive", eocd);
  uint64_t entries = Le(b, eocd + 10, 2);
  uint64_t cd_size = Le(b, eocd + 12, 4);
  uint64_t cd_offset = Le(b, eocd + 16, 4);
  uint64_t cd_limit = eocd;  // the central directory ends before the records that describe it

  if (eocd >= kLocatorSize && Le(b, eocd - kLocatorSize, 4) == kZip64LocatorSig) {
    uint64_t loc = eocd - kLocatorSize;
    uint64_t z = Le(b, loc + 8, 8);
    if (!Fits(z, kZip64EocdSize, loc) || Le(b, z, 4) != kZip64EocdSig) {
      return Bad("zip64 locator points at no zip64 end-of-central-directory record", loc);
    }
    uint64_t record = Le(b, z + 4, 8);
    if (record < kZip64EocdSize - 12 || !Fits(z + 12, record, loc)) {
      return Bad("zip64 end-of-central-directory record of a wrong size", z);
    }
    if (Le(b, z + 16, 4) != 0 || Le(b, z + 20, 4) != 0) return Bad("multi-disk archive", z);
    entries = Le(b, z + 32, 8);
    cd_size = Le(b, z + 40, 8);
    cd_offset = Le(b, z + 48, 8);
    cd_limit = z;
  } else if (entries == 0xFFFF || cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF) {
    return Bad("zip64 sizes without a zip64 record", eocd);
  }
  if (!Fits(cd_offset, cd_size, cd_limit)) {
    return Bad(absl::StrCat("central directory of ", cd_size, " bytes at ", cd_offset,
                            " runs past its end record"), eocd);
  }
  if (entries > cd_size / kCentralSize) return Bad(absl::StrCat(entries, " entries cannot fit"), eocd);

  uint64_t at = cd_offset;
  const uint64_t cd_end = cd_offset + cd_size;
  uint64_t total_uncompressed = 0;
  for (uint64_t k = 0; k < entries; ++k) {
    if (!Fits(at, kCentralSize, cd_end) || Le(b, at, 4) != kCentralSig) {
      return Bad(absl::StrCat("central directory entry ", k, " missing"), at);
    }
    uint64_t method = Le(b, at + 10, 2);
    uint64_t comp = Le(b, at + 20, 4);
    uint64_t uncomp = Le(b, at + 24, 4);
    uint64_t name_len = Le(b, at + 28, 2);
    uint64_t extra_len = Le(b, at + 30, 2);
    uint64_t comment_len = Le(b, at + 32, 2);
    uint64_t local = Le(b, at + 42, 4);
    uint64_t next = at + kCentralSize + name_len + extra_len + comment_len;
    if (next > cd_end) return Bad(absl::StrCat("central directory entry ", k, " runs past the directory"), at);
    std::string name(b.substr(at + kCentralSize, name_len));
    // zip64 extended information: the 64-bit fields, in this order, for those marked 0xFFFFFFFF.
    if (uncomp == 0xFFFFFFFF || comp == 0xFFFFFFFF || local == 0xFFFFFFFF) {
      uint64_t e = at + kCentralSize + name_len;
      const uint64_t e_end = e + extra_len;
      bool found = false;
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
          if (!take(&uncomp) || !take(&comp) || !take(&local)) {
            return Bad(absl::StrCat("entry '", name, "': truncated zip64 field"), e);
          }
          found = true;
          break;
        }
        e += 4 + len;
      }
      if (!found) return Bad(absl::StrCat("entry '", name, "': 32-bit size marker without zip64 field"), at);
    }
    if (method != 0 && method != 8) {
      return Bad(absl::StrCat("entry '", name, "': compression method ", method, " (only stored or deflated)"), at);
    }
    if (method == 0 && comp != uncomp) {
      return Bad(absl::StrCat("entry '", name, "' is stored but claims ", uncomp,
                              " bytes uncompressed and ", comp, " stored"), at);
    }
    if (!Fits(local, kLocalSize, cd_offset) || Le(b, local, 4) != kLocalSig) {
      return Bad(absl::StrCat("entry '", name, "': no local header at ", local), at);
    }
    uint64_t data = local + kLocalSize + Le(b, local + 26, 2) + Le(b, local + 28, 2);
    if (!Fits(data, comp, cd_offset)) {
      return Bad(absl::StrCat("entry '", name, "': ", comp, " bytes of data at ", data,
                              " run into the central directory"), local);
    }
    if (uncomp > static_cast<uint64_t>(max_uncompressed_bytes) ||
        total_uncompressed + uncomp > static_cast<uint64_t>(max_uncompressed_bytes)) {
      return Bad(absl::StrCat("entries claim more than ", max_uncompressed_bytes,
                              " bytes uncompressed (entry '", name, "': ", uncomp, ")"), at);
    }
    total_uncompressed += uncomp;
    // Pickles LibTorch will unpickle: stored ones are checked in place (LibTorch writes them
    // stored; a deflated pickle cannot be read without inflating it and is left to LibTorch).
    // miniz finds names case-insensitively, so "data.PKL" is read as "data.pkl".
    if (method == 0 && absl::EndsWithIgnoreCase(name, ".pkl")) {
      absl::Status pk = CheckPickle(b.substr(data, comp), name, data);
      if (!pk.ok()) return pk;
    }
    at = next;
  }
  return absl::OkStatus();
}

}  // namespace sentier
