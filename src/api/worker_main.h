// Worker mode: a raylet started this executable (TROUPE_WORKER_MODE=1) to run tasks. RunWorker
// connects a CoreWorker to the raylet named in the environment, runs the functions, actor
// factories and actor methods this executable registered (TROUPE_REMOTE) as tasks arrive, and
// exits the process when the raylet or the actor says so. The worker's actor instance lives here.
// Runs on the thread that called Init; task executor threads call back into it.
#pragma once

namespace troupe::internal {

// Never returns: _exit(0) after the task loop ends, 1 or 2 if the worker cannot start.
[[noreturn]] void RunWorker();

}  // namespace troupe::internal
