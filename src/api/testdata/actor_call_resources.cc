// Must NOT compile: resources set on an actor call (they belong to the actor).
// compile_error_test.sh checks that the compiler's message says why and where to set them instead.
#include "troupe/api.h"

class Worker {
 public:
  static Worker* Create() { return new Worker; }
  int Run(int x) { return x; }
};
TROUPE_REMOTE(Worker::Create, &Worker::Run);

int main() {
  troupe::ActorHandle<Worker> worker;
  worker.Task(&Worker::Run).SetResources({{"GPU", 1}}).Remote(1);
  return 0;
}
