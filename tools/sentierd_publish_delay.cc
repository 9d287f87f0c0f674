// sentierd_publish_delay.cc — a test-only build of sentierd that sleeps before each publishing
// rename, so that the crash-safety test (sentierd_e2e_test.sh, kill -9 during publishing) lands
// its kills inside publication. Everything else is sentierd (tools/sentierd.cc).
//
//   sentierd_publish_delay --publish_delay_ms=100 --registry=REG --output=OUT ...
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include <gflags/gflags.h>

#include "tools/sentierd_main.h"

DEFINE_int32(publish_delay_ms, 0, "(test) sleep this long before each publishing rename");

int main(int argc, char** argv) {
  return sentier::SentierdMain(argc, argv, [](sentier::ManagerOptions* o) {
    if (FLAGS_publish_delay_ms <= 0) return;
    o->before_publish_rename = [](const std::string&, int64_t) {
      std::this_thread::sleep_for(std::chrono::milliseconds(FLAGS_publish_delay_ms));
    };
  });
}
