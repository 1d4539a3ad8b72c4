// Must NOT compile: a task argument of a type with no msgpack support. compile_error_test.sh
// checks that the compiler's message names the type and the fix.
#include "troupe/api.h"

struct NotSerializable {
  int value;
};

int Use(NotSerializable x) { return x.value; }
TROUPE_REMOTE(Use);

int main() { return 0; }
