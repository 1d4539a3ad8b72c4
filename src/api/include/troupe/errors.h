// Errors the Troupe API throws to user code. The public API reports failures as exceptions (as
// Ray's C++ API does); everything below the API uses absl::Status. All derive from TroupeError,
// so `catch (const troupe::TroupeError&)` catches every Troupe failure.
#pragma once

#include <stdexcept>
#include <string>

namespace troupe {

class TroupeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The user function threw. Carries the remote exception's type and message, the function name,
// where it ran, and where it was thrown: remote_stack(), one frame per line, the throw site
// first ("#0 Parse(std::string const&) at /src/app.cc:12"; without debug info the binary and
// offset instead of file:line; "" when the worker could not record it). what() ends with it.
class TaskError : public TroupeError {
 public:
  TaskError(std::string function_name, std::string exception_type, std::string exception_message,
            std::string node_id, int pid, std::string remote_stack = "")
      : TroupeError(
            "task " + function_name + " failed on node " + node_id.substr(0, 8) + " (pid " +
            std::to_string(pid) + "): " + exception_type + ": " + exception_message +
            (remote_stack.empty() ? "" : "\nremote stack (the throw first):\n" + remote_stack)),
        function_name_(std::move(function_name)),
        exception_type_(std::move(exception_type)),
        exception_message_(std::move(exception_message)),
        node_id_(std::move(node_id)),
        pid_(pid),
        remote_stack_(std::move(remote_stack)) {}

  const std::string& function_name() const { return function_name_; }
  const std::string& exception_type() const { return exception_type_; }
  const std::string& exception_message() const { return exception_message_; }
  const std::string& node_id() const { return node_id_; }
  int pid() const { return pid_; }
  const std::string& remote_stack() const { return remote_stack_; }

 private:
  std::string function_name_;
  std::string exception_type_;
  std::string exception_message_;
  std::string node_id_;
  int pid_;
  std::string remote_stack_;
};

// The task could not run to completion: its worker or node died more often than its retries
// allow, or it could not be scheduled.
class TaskFailedError : public TroupeError {
 public:
  using TroupeError::TroupeError;
};

// The task's worker was killed by its node's memory monitor (the node's memory use passed
// --memory-usage-threshold) and the task had no retries left. The message names the task, the
// node and the memory use; give the task fewer parallel siblings, more retries or a bigger node.
class OutOfMemoryError : public TroupeError {
 public:
  using TroupeError::TroupeError;
};

// Get/Wait gave up before the object was ready.
class GetTimeoutError : public TroupeError {
 public:
  using TroupeError::TroupeError;
};

// The object cannot be read any more: every copy is gone (their nodes died) and it cannot be
// rebuilt (it was made by Put), or it was already freed. The subclasses below say more; catch
// ObjectLostError for all of them. The message names the object and says why.
class ObjectLostError : public TroupeError {
 public:
  using TroupeError::TroupeError;
};

// The object is borrowed and its owner (the process that created it) died or is unreachable:
// nobody can tell where it lives or rebuild it.
class OwnerDiedError : public ObjectLostError {
 public:
  using ObjectLostError::ObjectLostError;
};

// Every copy of the object is gone and rebuilding it from lineage (running the task that made it
// again) was not possible: the task's max_retries are used up, its lineage was evicted by the
// lineage budget, it came from an actor call, an argument could not be rebuilt, or the rerun
// failed. The message says which.
class ObjectReconstructionFailedError : public ObjectLostError {
 public:
  using ObjectLostError::ObjectLostError;
};

// The task was cancelled with troupe::Cancel.
class TaskCancelledError : public TroupeError {
 public:
  using TroupeError::TroupeError;
};

// The node's object store is full and nothing could be evicted or spilled.
class ObjectStoreFullError : public TroupeError {
 public:
  using TroupeError::TroupeError;
};

// A value could not be decoded as the type asked for (e.g. Get<int> of a string).
class SerializationError : public TroupeError {
 public:
  using TroupeError::TroupeError;
};

// The actor is dead (or died while running the call): the message says why — its constructor
// threw, its process crashed (exit code or signal), its node died, it was killed, it exited.
class ActorDiedError : public TroupeError {
 public:
  using TroupeError::TroupeError;
};

// The driver lost its cluster: the GCS or this node's raylet stayed unreachable for longer than
// the reconnect limit (Config::gcs_reconnect_timeout_s). Every pending call and every later one
// (Get, Remote, actor calls, large Puts) throws it; the message names the cluster's address, how
// long it has been unreachable and what to do. Shutdown still returns promptly afterwards.
class ClusterUnreachableError : public TroupeError {
 public:
  using TroupeError::TroupeError;
};

// A call's arguments are invalid and nothing was submitted: thrown at once by Remote() and
// CreatePlacementGroup, e.g. for a resource map with an empty name, a negative, NaN or infinite
// amount, or 1.5 GPUs. The message names the field, the resource and the bad value.
class InvalidArgumentError : public TroupeError {
 public:
  using TroupeError::TroupeError;
};

// Init was not called, or the cluster cannot be reached.
class RuntimeError : public TroupeError {
 public:
  using TroupeError::TroupeError;
};

}  // namespace troupe
