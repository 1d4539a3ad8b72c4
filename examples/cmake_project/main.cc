// A Troupe program built outside the repository against the installed SDK (docs/sdk.md): tasks,
// an actor and Put/Get on an embedded local cluster (or the cluster at TROUPE_ADDRESS). Prints
// what it computed and exits 0 only when every result is right.
#include <iostream>
#include <string>
#include <vector>

#include "troupe/api.h"

int Square(int x) { return x * x; }

int Sum(const std::vector<int>& values) {
  int total = 0;
  for (int value : values) total += value;
  return total;
}

class Counter {
 public:
  static Counter* Create(int start) { return new Counter(start); }
  int Add(int amount) { return value_ += amount; }

 private:
  explicit Counter(int start) : value_(start) {}
  int value_;
};

TROUPE_REMOTE(Square, Sum, Counter::Create, &Counter::Add);

namespace {
bool Check(const std::string& what, int got, int want) {
  std::cout << what << " = " << got << (got == want ? "" : " (WRONG, want " + std::to_string(want) + ")")
            << std::endl;
  return got == want;
}
}  // namespace

int main(int argc, char** argv) {
  troupe::Init(argc, argv);  // workers run this same executable; above this line runs in them too
  bool ok = true;

  // Tasks, and an ObjectRef passed to a task.
  std::vector<troupe::ObjectRef<int>> squares;
  for (int i = 1; i <= 4; ++i) squares.push_back(troupe::Task(Square).Remote(i));
  int sum_of_squares = 0;
  for (const auto& value : troupe::Get(squares)) sum_of_squares += *value;
  ok &= Check("1^2 + 2^2 + 3^2 + 4^2", sum_of_squares, 30);

  // Put/Get, and a stored object as a task's argument.
  troupe::ObjectRef<std::vector<int>> numbers = troupe::Put(std::vector<int>{5, 6, 7});
  ok &= Check("Get(Put({5, 6, 7}))[2]", (*troupe::Get(numbers))[2], 7);
  ok &= Check("Sum(Put({5, 6, 7}))", *troupe::Get(troupe::Task(Sum).Remote(numbers)), 18);

  // An actor keeps its state between calls.
  auto counter = troupe::Actor(Counter::Create).Remote(100);
  counter.Task(&Counter::Add).Remote(1);
  ok &= Check("counter after +1 +2", *troupe::Get(counter.Task(&Counter::Add).Remote(2)), 103);

  troupe::Shutdown();
  std::cout << (ok ? "troupe_app: all results right" : "troupe_app: WRONG results") << std::endl;
  return ok ? 0 : 1;
}
