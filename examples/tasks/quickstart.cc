// Remote tasks and objects in a few lines. Runs on an embedded local cluster by default, or on
// the cluster at TROUPE_ADDRESS.
//   bazel run //examples/tasks:quickstart
#include <iostream>
#include <numeric>

#include "troupe/api.h"

int Plus(int a, int b) { return a + b; }

// Workers' output reaches the driver, prefixed with the worker's pid and node.
int Greet(int n) {
  std::cout << "hello from a worker, task " << n << std::endl;
  return n;
}

// A task that submits tasks and waits for them (nested tasks).
int SumOfSquares(int n) {
  std::vector<troupe::ObjectRef<int>> parts;
  for (int i = 1; i <= n; ++i) parts.push_back(troupe::Task(Plus).Remote(i * i, 0));
  int sum = 0;
  for (const auto& value : troupe::Get(parts)) sum += *value;
  return sum;
}

std::vector<double> Ramp(int n) {
  std::vector<double> values(n);
  std::iota(values.begin(), values.end(), 0.0);
  return values;
}

double Total(const std::vector<double>& values) {
  return std::accumulate(values.begin(), values.end(), 0.0);
}

TROUPE_REMOTE(Plus, Greet, SumOfSquares, Ramp, Total);

int main(int argc, char** argv) {
  troupe::Init(argc, argv);  // code above this line also runs in every worker
  auto three = troupe::Task(Plus).Remote(1, 2);
  std::cout << "1 + 2 = " << *troupe::Get(three) << "\n";

  // ObjectRefs as arguments: the value is fetched where the task runs.
  auto six = troupe::Task(Plus).Remote(three, three);
  std::cout << "3 + 3 = " << *troupe::Get(six) << "\n";

  std::cout << "sum of squares 1..10 = " << *troupe::Get(troupe::Task(SumOfSquares).Remote(10))
            << "\n";

  // A 8 MB result goes through the shared-memory object store, not the RPC reply.
  auto ramp = troupe::Task(Ramp).Remote(1'000'000);
  std::cout << "total of the ramp = " << *troupe::Get(troupe::Task(Total).Remote(ramp)) << "\n";
  auto view = troupe::GetView(ramp);  // zero-copy view into shared memory
  std::cout << "ramp[999999] = " << (*view)[999999] << std::endl;
  troupe::Get(troupe::Task(Greet).Remote(1));
  troupe::Shutdown();  // prints the workers' output still on its way (the greeting) first
  return 0;
}
