// Multiple returns: a task and an actor method returning std::tuple, called with
// SetNumReturns<N>() so that each element is an ObjectRef (an object) of its own; one of them
// is dropped (freed) while the other is still read, and one is handed to another task.
//   bazel run //examples/tasks:multiple_returns    (an embedded cluster, or TROUPE_ADDRESS)
#include <iostream>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "troupe/api.h"

// Splits 0..rows-1 into a training and a test part.
std::tuple<std::vector<double>, std::vector<double>> TrainTestSplit(int rows, double test_share) {
  std::vector<double> train, test;
  for (int i = 0; i < rows; ++i) (i < rows * (1 - test_share) ? train : test).push_back(i);
  return {train, test};
}

double Mean(const std::vector<double>& values) {
  return std::accumulate(values.begin(), values.end(), 0.0) / values.size();
}

class Accumulator {
 public:
  static Accumulator* Create() { return new Accumulator; }
  std::tuple<int, int> Add(int x) { return {total_ += x, ++count_}; }  // total and count

 private:
  int total_ = 0, count_ = 0;
};

TROUPE_REMOTE(TrainTestSplit, Mean, Accumulator::Create, &Accumulator::Add);

int main(int argc, char** argv) {
  troupe::Init(argc, argv);
  {
    auto [train, test] = troupe::Task(TrainTestSplit).SetNumReturns<2>().Remote(100000, 0.2);
    // Two objects of one task: the same task ID, return indices 1 and 2 (the last 8 digits).
    std::cout << "train " << train.ID() << "\ntest  " << test.ID() << "\n";
    train = troupe::ObjectRef<std::vector<double>>();  // freed; `test` stays readable
    std::cout << "test rows: " << troupe::Get(test)->size() << "\n";
    std::cout << "mean of test (in a task): " << *troupe::Get(troupe::Task(Mean).Remote(test))
              << "\n";
  }
  auto accumulator = troupe::Actor(Accumulator::Create).Remote();
  for (int x : {5, 7}) {
    auto [total, count] = accumulator.Task(&Accumulator::Add).SetNumReturns<2>().Remote(x);
    std::cout << "total " << *troupe::Get(total) << " after " << *troupe::Get(count)
              << " call(s)\n";
  }
  auto both = accumulator.Task(&Accumulator::Add).Remote(1);  // the plain call: one ref
  std::cout << "plain call: total " << std::get<0>(*troupe::Get(both)) << "\n";
  troupe::Shutdown();
}
