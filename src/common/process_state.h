// What the kernel says about another process: whether it is gone or already being torn down.
//
// A process killed with SIGKILL closes its sockets while the kernel tears it down, before it
// becomes a zombie and before its children get their parent-death signal. A peer that sees a
// connection reset can ask ProcessIsExiting to tell "that process died" from "a transient
// network error" without waiting.
// Linux only (reads /proc). Stateless; thread-safe.
#pragma once

namespace troupe {

// True if no process `pid` exists, it is a zombie or dead, or the kernel has begun its exit
// (PF_EXITING in the flags field of /proc/<pid>/stat). False for a running process and for
// pid <= 0 (nothing to ask about).
bool ProcessIsExiting(int pid);

}  // namespace troupe
