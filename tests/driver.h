// Driver: troupe::Init against a TestCluster for the scope of a test, Shutdown at its end.
#pragma once

#include <string>

#include "tests/test_cluster.h"
#include "troupe/api.h"

namespace troupe::testing {

class Driver {
 public:
  explicit Driver(TestCluster& cluster, std::string ns = "default") {
    Config config;
    config.address = cluster.gcs_address();
    config.token = cluster.token();
    config.namespace_name = std::move(ns);
    Init(config);
  }
  ~Driver() { Shutdown(); }
  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;
};

}  // namespace troupe::testing
