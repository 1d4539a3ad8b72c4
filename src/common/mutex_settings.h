// Process-wide Abseil Mutex settings, chosen once by a composition root (the `troupe` binary's
// main, troupe::Init for drivers and workers) before it starts threads.
// Debian's Abseil is built without NDEBUG, so by default every absl::Mutex::Lock — Troupe's and
// gRPC's alike — runs deadlock detection: a lookup in one process-wide graph behind a global
// spin lock, plus graph upkeep when a mutex is destroyed. Profiles of small actor calls showed
// it at ~2% of all CPU. Unit tests do not call this, so they keep detecting lock-order cycles.
// Thread-safe (an atomic inside Abseil).
#pragma once

namespace troupe {

// Turns Abseil's Mutex deadlock detection off for this process, unless
// TROUPE_MUTEX_DEADLOCK_DETECTION=1 asks to keep it (for debugging a suspected lock cycle).
void UseProductionMutexSettings();

}  // namespace troupe
