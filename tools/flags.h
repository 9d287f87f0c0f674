// flags.h — command-line checks shared by Sentier's tools.
//
// FindUnknownFlag: the first argument that names no defined gflags flag ("--inptu=x",
// "--nofoo" for an undefined bool), or "" when all are known. gflags itself exits 1 on an unknown
// flag; the tools call this first so that bad usage exits 2, as documented.
#ifndef SENTIER_TOOLS_FLAGS_H_
#define SENTIER_TOOLS_FLAGS_H_

#include <string>

#include <gflags/gflags.h>

#include "absl/strings/match.h"

namespace sentier {

inline std::string FindUnknownFlag(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (!absl::StartsWith(arg, "-") || arg.find_first_not_of('-') == std::string::npos) continue;
    std::string name = arg.substr(arg.find_first_not_of('-'));
    name = name.substr(0, name.find('='));
    gflags::CommandLineFlagInfo info;
    bool known = gflags::GetCommandLineFlagInfo(name.c_str(), &info) ||
                 (absl::StartsWith(name, "no") &&
                  gflags::GetCommandLineFlagInfo(name.substr(2).c_str(), &info));
    if (!known) return arg;
  }
  return "";
}

}  // namespace sentier

#endif  // SENTIER_TOOLS_FLAGS_H_
