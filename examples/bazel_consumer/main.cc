// A Troupe program in a Bazel workspace of its own (docs/sdk.md): a task, an actor and Put/Get
// on an embedded local cluster. Exits 0 only when every result is right.
#include <iostream>

#include "troupe/api.h"

int Twice(int x) { return 2 * x; }

class Accumulator {
 public:
  static Accumulator* Create() { return new Accumulator(); }
  int Add(int amount) { return total_ += amount; }

 private:
  int total_ = 0;
};

TROUPE_REMOTE(Twice, Accumulator::Create, &Accumulator::Add);

int main(int argc, char** argv) {
  troupe::Init(argc, argv);
  const int twice = *troupe::Get(troupe::Task(Twice).Remote(troupe::Put(21)));
  auto accumulator = troupe::Actor(Accumulator::Create).Remote();
  accumulator.Task(&Accumulator::Add).Remote(40);
  const int total = *troupe::Get(accumulator.Task(&Accumulator::Add).Remote(2));
  troupe::Shutdown();
  std::cout << "Twice(Put(21)) = " << twice << ", accumulator = " << total << std::endl;
  return twice == 42 && total == 42 ? 0 : 1;
}
