// Must NOT compile: SetNumReturns<N>() with N other than the size of the std::tuple the function
// returns. compile_error_test.sh checks that the compiler's message says what N must be.
#include <string>
#include <tuple>

#include "troupe/api.h"

std::tuple<int, std::string> Pair(int x) { return {x, "x"}; }
TROUPE_REMOTE(Pair);

int main() {
  auto [a, b, c] = troupe::Task(Pair).SetNumReturns<3>().Remote(1);
  return 0;
}
