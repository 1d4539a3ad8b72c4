#include "src/api/worker_main.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <typeinfo>

#include "src/api/core_worker_runtime.h"
#include "src/api/runtime_gateway.h"
#include "src/api/throw_stacks.h"
#include "src/core_worker/core_worker.h"
#include "src/rpc/transport_security.h"
#include "troupe/api.h"

namespace troupe::internal {

std::string DemangledTypeName(const std::type_info& type);  // api_support.cc

namespace {

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

// The actor this process holds (if any), created by its creation task; set and read on the
// task executor threads, which the core worker orders (the creation task runs before any call).
std::shared_ptr<void> actor_instance;
bool actor_restarted = false;
// What the actor holds, from its creation task: an actor call's runtime context reports these.
std::map<std::string, double> actor_resources;
std::string actor_placement_group_id;
int actor_bundle_index = -1;

bool ActorWasRestarted() { return actor_restarted; }

void DescribeCurrentTask(RuntimeContext* context) {
  // The task running on this thread (an actor with max_concurrency > 1 runs several at once, one
  // per executor thread; an async actor's loop switches between its calls); null between tasks.
  const rpc::TaskSpec* spec = CoreWorker::CurrentTaskSpec();
  if (spec == nullptr) return;
  context->task_id = BytesToHex(spec->task_id());
  if (spec->type() == rpc::TaskSpec::ACTOR_CREATION_TASK && context->actor_id.empty()) {
    context->actor_id = BytesToHex(spec->actor_id());  // its factory runs: the actor is this one
  }
  context->was_current_actor_restarted = !context->actor_id.empty() && actor_restarted;
  if (spec->type() == rpc::TaskSpec::ACTOR_TASK) {
    context->assigned_resources = actor_resources;
    context->placement_group_id = BytesToHex(actor_placement_group_id);
    context->bundle_index = actor_placement_group_id.empty() ? -1 : actor_bundle_index;
    return;
  }
  context->assigned_resources = {spec->required_resources().begin(),
                                 spec->required_resources().end()};
  context->placement_group_id = BytesToHex(spec->placement_group_id());
  context->bundle_index = spec->placement_group_id().empty() ? -1 : spec->bundle_index();
}

// SIGTERM's handler writes a byte here (async-signal-safe); RunWorker's stop thread reads it.
int stop_pipe[2] = {-1, -1};
void OnStopSignal(int) {
  const char byte = 1;
  [[maybe_unused]] ssize_t ignored = write(stop_pipe[1], &byte, 1);
}

// Runs the function, actor factory or actor method a task names; throws what it throws.
std::shared_ptr<InvokeResult> Invoke(const rpc::TaskSpec& spec, const std::vector<Buffer>& args) {
  const auto& registry = FunctionRegistry::Instance();
  const std::string& name = spec.function_name();
  switch (spec.type()) {
    case rpc::TaskSpec::ACTOR_CREATION_TASK: {
      const auto* creator = registry.FindCreator(name);
      if (creator == nullptr)
        throw TroupeError("actor factory " + name + " is not registered (TROUPE_REMOTE)");
      actor_restarted = spec.actor_num_restarts() > 0;
      actor_resources = {spec.required_resources().begin(), spec.required_resources().end()};
      actor_placement_group_id = spec.placement_group_id();
      actor_bundle_index = spec.bundle_index();
      actor_instance = (*creator)(args);
      auto result = std::make_shared<InvokeResult>();
      result->value = Serialize(msgpack::type::nil_t());
      return result;
    }
    case rpc::TaskSpec::ACTOR_TASK: {
      const auto* method = registry.FindMethod(name);
      if (method == nullptr)
        throw TroupeError("actor method " + name + " is not registered (TROUPE_REMOTE)");
      if (!actor_instance) throw TroupeError("this worker holds no actor");
      return std::make_shared<InvokeResult>(
          (*method)(actor_instance.get(), args, std::max(1, spec.num_returns())));
    }
    default: {
      const auto* invoker = registry.FindFunction(name);
      if (invoker == nullptr) {
        throw TroupeError("function " + name +
                          " is not registered in this executable (TROUPE_REMOTE)");
      }
      return std::make_shared<InvokeResult>((*invoker)(args, std::max(1, spec.num_returns())));
    }
  }
}

// The outcome of a finished invocation.
TaskOutcome OutcomeOf(std::shared_ptr<InvokeResult> result) {
  TaskOutcome outcome;
  // References inside the result: `result` holds them (the returned value keeps its
  // ObjectRefs) until the core worker has handed them over to the caller.
  auto contained_of = [](const SerializedValue& value) {
    std::vector<ObjectRefInfo> contained;
    for (const auto& inner : value.contained_refs) {
      auto id = ObjectId::FromBinary(inner.object_id);
      if (id.ok()) contained.push_back({*id, inner.owner_address});
    }
    return contained;
  };
  if (result->parts.empty()) {
    outcome.size = result->value.size();
    outcome.write = [result](char* out) { result->value.CopyTo(out); };
    outcome.contained = contained_of(result->value);
  } else {
    // One object per element of the returned tuple (spec.num_returns() > 1).
    for (size_t i = 0; i < result->parts.size(); ++i) {
      TaskOutcome::Part part;
      part.size = result->parts[i].size();
      part.write = [result, i](char* out) { result->parts[i].CopyTo(out); };
      part.contained = contained_of(result->parts[i]);
      outcome.parts.push_back(std::move(part));
    }
  }
  outcome.keep_alive = std::move(result);
  return outcome;
}

// The outcome of the exception in flight (call inside a catch, with a ThrowStackCapture alive
// since the throw: the stack of an exception that escapes the function).
TaskOutcome OutcomeOfCurrentException() {
  TaskOutcome outcome;
  outcome.threw = true;
  try {
    throw;
  } catch (const std::exception& e) {
    outcome.exception_type = DemangledTypeName(typeid(e));
    outcome.exception_message = e.what();
    outcome.exception_stack = StackOfThrow(dynamic_cast<const void*>(&e));
  } catch (...) {
    outcome.exception_type = "unknown exception";
    outcome.exception_message = "a non-std::exception was thrown";
    outcome.exception_stack = StackOfThrow(nullptr);  // the last throw: most likely this one
  }
  return outcome;
}

// Runs a pushed task and reports its result or the exception it threw; for an async actor's
// method that suspended, a pending outcome completed on the actor's event loop.
TaskOutcome ExecuteRegistered(const rpc::TaskSpec& spec, const std::vector<ObjectBuffer>& args) {
  std::vector<Buffer> buffers;
  buffers.reserve(args.size());
  for (const auto& arg : args) buffers.push_back({arg.data, arg.size, arg.holder});
  ThrowStackCapture capture;  // the stack of an exception that escapes the function
  try {
    std::shared_ptr<InvokeResult> result = Invoke(spec, buffers);
    if (!result->then) return OutcomeOf(std::move(result));
    TaskOutcome outcome;
    outcome.pending = [then = std::move(result->then)](std::function<void(TaskOutcome)> finish) {
      then([finish = std::move(finish)](InvokeResult value, std::exception_ptr error) {
        if (!error) {
          finish(OutcomeOf(std::make_shared<InvokeResult>(std::move(value))));
          return;
        }
        // Resumed closures run inside a ThrowStackCapture (CoreWorkerRuntime's AsyncCall).
        try {
          std::rethrow_exception(error);
        } catch (...) {
          finish(OutcomeOfCurrentException());
        }
      });
    };
    return outcome;
  } catch (...) {
    return OutcomeOfCurrentException();
  }
}

}  // namespace

void RunWorker() {
  // Output goes to the worker's log file; line buffering lets the driver show it promptly.
  setvbuf(stdout, nullptr, _IOLBF, 0);
  CoreWorkerOptions options;
  options.is_driver = false;
  options.raylet_address = Env("TROUPE_RAYLET_ADDRESS");
  options.gcs_address = Env("TROUPE_GCS_ADDRESS");
  options.token = Env("TROUPE_TOKEN");
  // The node's TLS files, from the raylet: the worker serves and connects like its raylet.
  if (auto status = UseTlsDir(Env("TROUPE_TLS_DIR")); !status.ok()) {
    fprintf(stderr, "troupe worker: TROUPE_TLS_DIR: %s\n", std::string(status.message()).c_str());
    _exit(2);
  }
  options.node_ip = Env("TROUPE_NODE_IP").empty() ? "127.0.0.1" : Env("TROUPE_NODE_IP");
  auto job_id = JobId::FromHex(Env("TROUPE_JOB_ID"));
  auto worker_id = WorkerId::FromHex(Env("TROUPE_WORKER_ID"));
  if (!job_id.ok() || !worker_id.ok()) {
    fprintf(stderr, "troupe worker: bad TROUPE_JOB_ID/TROUPE_WORKER_ID in the environment\n");
    _exit(2);
  }
  options.job_id = *job_id;
  options.worker_id = *worker_id;
  options.execute = ExecuteRegistered;
  options.testing_drop_actor_replies = Env("TROUPE_TESTING_DROP_ACTOR_REPLIES");
  options.record_task_events = Env("TROUPE_TASK_EVENTS") != "0";
  // SIGTERM is the raylet's graceful stop (its job ended, or the node stops). Its handler only
  // writes to a pipe; a thread reading it asks the core worker to report what it buffered and
  // end the task loop, then the worker shuts down as when told to exit. (A handler, not a
  // blocked mask: processes a task starts must still die of SIGTERM, and exec resets handlers.)
  // The raylet SIGKILLs a worker that takes longer than its grace.
  if (pipe2(stop_pipe, O_CLOEXEC) == 0) {
    struct sigaction action {};
    action.sa_handler = OnStopSignal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &action, nullptr);
  }
  auto core = std::make_shared<CoreWorker>(options);
  if (auto status = core->Start(); !status.ok()) {
    fprintf(stderr, "troupe worker: cannot start: %s\n", std::string(status.message()).c_str());
    _exit(1);
  }
  // The job's namespace (Config::namespace_name of its driver), set by the raylet: GetActor and
  // named actors created here use it like the driver does.
  if (!Env("TROUPE_NAMESPACE").empty()) core->set_namespace_name(Env("TROUPE_NAMESPACE"));
  RuntimeGateway& gateway = RuntimeGateway::Process();
  gateway.Open(std::make_shared<CoreWorkerRuntime>(core, options.token, ActorWasRestarted,
                                                   DescribeCurrentTask));
  if (stop_pipe[0] >= 0) {
    // Detached: the process ends with _exit below, signal or not.
    std::thread([core] {
      char byte;
      ssize_t n;
      while ((n = read(stop_pipe[0], &byte, 1)) < 0 && errno == EINTR) {
      }
      if (n == 1) core->RequestStop();
    }).detach();
  }
  core->RunTaskLoop();
  gateway.Close();
  actor_instance.reset();
  core->Shutdown();
  fflush(stdout);
  fflush(stderr);
  _exit(0);
}

}  // namespace troupe::internal
