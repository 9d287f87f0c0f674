// daemon_state_fuzz.cc — libFuzzer target: the daemon's state reader (DaemonState::FromJson,
// what DaemonState::Load runs on OUT/.sentierd/state.json). Arbitrary text must give a state or
// an error; a state that loads must round-trip: FromJson(ToJson(s)) loads and prints the same.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "runtime/daemon/daemon_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto state = sentier::DaemonState::FromJson(text);
  if (!state.ok()) return 0;
  std::string json = state->ToJson();  // may not throw (it would terminate the daemon)
  auto again = sentier::DaemonState::FromJson(json);
  if (!again.ok() || again->ToJson() != json) std::abort();
  return 0;
}
