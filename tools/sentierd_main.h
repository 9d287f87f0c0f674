// sentierd_main.h — sentierd's main as a function, so that a test-only build of the daemon can
// add hooks to the manager's options without any test code in the production binary.
//
//   int main(int argc, char** argv) { return sentier::SentierdMain(argc, argv); }  // sentierd
//
// Flags, exit codes and messages: the header of tools/sentierd.cc.
#ifndef SENTIER_TOOLS_SENTIERD_MAIN_H_
#define SENTIER_TOOLS_SENTIERD_MAIN_H_

#include <functional>

#include "runtime/daemon/daemon_manager.h"

namespace sentier {

// OptionsHook: edits the manager's options after they are built from the flags (the daemon only;
// not called for a --job child). Production passes none.
using OptionsHook = std::function<void(ManagerOptions*)>;

// SentierdMain: parses the flags and runs the daemon, or one job with --job; returns the exit code.
int SentierdMain(int argc, char** argv, const OptionsHook& customize = nullptr);

}  // namespace sentier

#endif  // SENTIER_TOOLS_SENTIERD_MAIN_H_
