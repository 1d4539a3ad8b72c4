#include "src/collective/device_memory.h"

namespace troupe::collective {
namespace {

DeviceMemoryFactory* device_memory_factory = nullptr;

}  // namespace

void RegisterDeviceMemoryFactory(DeviceMemoryFactory factory) {
  // Called from static initialisers only (before any group exists), so no lock.
  device_memory_factory = new DeviceMemoryFactory(std::move(factory));
}

DeviceMemory* ProcessDeviceMemory() {
  // Never destroyed: groups may still be staging while the process exits.
  static DeviceMemory* const memory =
      device_memory_factory != nullptr ? (*device_memory_factory)().release() : nullptr;
  return memory;
}

}  // namespace troupe::collective
