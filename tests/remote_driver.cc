// A driver that removes its own executable right after Init, so the cluster's raylets must
// fetch the program from the GCS (content-addressed) to start workers — as on machines that do
// not share a filesystem with the driver. Used by tasks_test.
#include <unistd.h>

#include <iostream>

#include "troupe/api.h"

int Plus(int a, int b) { return a + b; }
TROUPE_REMOTE(Plus);

int main(int argc, char** argv) {
  troupe::Init(argc, argv);
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    self[n] = '\0';
    unlink(self);
  }
  std::cout << "result=" << *troupe::Get(troupe::Task(Plus).Remote(20, 22)) << std::endl;
  troupe::Shutdown();
  return 0;
}
