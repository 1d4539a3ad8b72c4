// gRPC 1.51 creates its EventEngine (a poller thread, a thread pool of two, a timer-manager
// thread: four threads) as soon as the first channel or server is made, only to store it in
// their arguments; with the client-idle filter off (MakeChannel), it is used only once a
// connection attempt fails (a subchannel's reconnect backoff), which most worker processes
// never see. Every thread counts against the machine's process-ID limit once per worker process,
// and each actor is a worker process. InstallLazyEventEngine makes gRPC's default EventEngine
// an empty one that creates the built-in engine the first time something really uses it, and
// forwards to it from then on: no threads until then, the same behaviour after.
// Call before the process makes its first gRPC channel or server (StartGrpcServer and
// MakeChannel do). Thread-safe; idempotent.
#pragma once

namespace troupe {

void InstallLazyEventEngine();

// Whether the built-in EventEngine was created in this process (tests).
bool BuiltInEventEngineCreated();

}  // namespace troupe
