// torch_error.h — the part of a LibTorch exception's text that says what went wrong.
//
// Errors raised inside the TorchScript interpreter start with "The following operation failed in
// the TorchScript interpreter." and a traceback; the cause ("RuntimeError: Expected all tensors to
// be on the same device, ...") is at the end. Other c10::Errors put the cause on the first line
// and a C++ backtrace after it. TorchErrorMessage returns the cause, on one line, at most
// `max_chars` long — what Sentier's reasons and messages quote.
#ifndef SENTIER_PASSES_TORCH_ERROR_H_
#define SENTIER_PASSES_TORCH_ERROR_H_

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace sentier {

inline std::string TorchErrorMessage(absl::string_view what, size_t max_chars = 600) {
  std::vector<absl::string_view> lines = absl::StrSplit(what, '\n', absl::SkipWhitespace());
  std::string out;
  if (!lines.empty() && absl::StrContains(lines[0], "failed in the TorchScript interpreter")) {
    // The cause is the last line naming an error type ("RuntimeError: ...") and what follows it.
    size_t cause = lines.size();
    for (size_t i = lines.size(); i-- > 1;) {
      absl::string_view l = absl::StripLeadingAsciiWhitespace(lines[i]);
      size_t colon = l.find(": ");
      if (colon != absl::string_view::npos && absl::EndsWith(l.substr(0, colon), "Error")) {
        cause = i;
        break;
      }
    }
    if (cause == lines.size()) cause = lines.size() - 1;
    std::vector<std::string> parts;
    for (size_t i = cause; i < lines.size(); ++i) {
      parts.emplace_back(absl::StripAsciiWhitespace(lines[i]));
    }
    out = absl::StrJoin(parts, " ");
  } else if (!lines.empty()) {
    out = std::string(absl::StripAsciiWhitespace(lines[0]));
  }
  if (out.size() > max_chars) out = out.substr(0, max_chars - 3) + "...";
  return out;
}

}  // namespace sentier

#endif  // SENTIER_PASSES_TORCH_ERROR_H_
