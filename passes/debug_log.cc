// debug_log.cc — the process-wide switch and sink of SENTIER_DEBUG (see the header).
#include "passes/debug_log.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace sentier {

unsigned& DebugCategories() {
  static unsigned categories = 0;
  return categories;
}

std::function<void(absl::string_view)>& DebugSink() {
  static std::function<void(absl::string_view)> sink;
  return sink;
}

absl::Status EnableDebugCategories(absl::string_view names) {
  for (absl::string_view name : absl::StrSplit(names, ',', absl::SkipEmpty())) {
    if (name == "groups") {
      DebugCategories() |= kGroups;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown debug category '", name, "' (known: groups)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace sentier
