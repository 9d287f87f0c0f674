// debug_log.h — debug output of the graph engine, off by default, in the manner of LLVM_DEBUG
// and LibTorch's GRAPH_DEBUG: a pass writes
//
//   SENTIER_DEBUG(kGroups, "candidate %" << v->debugName() << " -> " << key);
//
// and nothing is formatted unless that category was switched on for the process by the tool
// (sentier_opt --debug=groups). passes/ reads no environment variable and does no I/O of its
// own: the lines go to the sink the tool installs (stderr in sentier_opt).
#ifndef SENTIER_PASSES_DEBUG_LOG_H_
#define SENTIER_PASSES_DEBUG_LOG_H_

#include <functional>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace sentier {

enum DebugCategory : unsigned {
  kGroups = 1u << 0,  // group rules: every candidate member and its key
};

// The categories switched on (a bit set of DebugCategory); 0 by default.
unsigned& DebugCategories();
// Where debug lines go; set by the tool that switches categories on.
std::function<void(absl::string_view)>& DebugSink();

// EnableDebugCategories: "groups" (comma-separated names); InvalidArgumentError for unknown ones.
absl::Status EnableDebugCategories(absl::string_view names);

}  // namespace sentier

#define SENTIER_DEBUG(category, stream_expr)                          \
  do {                                                                \
    if ((::sentier::DebugCategories() & (category)) != 0u &&          \
        ::sentier::DebugSink()) {                                     \
      std::ostringstream sentier_debug_line;                          \
      sentier_debug_line << stream_expr;                              \
      ::sentier::DebugSink()(sentier_debug_line.str());               \
    }                                                                 \
  } while (false)

#endif  // SENTIER_PASSES_DEBUG_LOG_H_
