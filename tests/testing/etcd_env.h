// Where the tests' etcd is (tests/testing/etcd.sh, started by a CTest fixture): the file named
// by TIANSHU_TEST_ETCD holds its client endpoints, "host:port,host:port".
//   auto endpoints = testing::TestEtcdEndpoints();   // "" when no etcd was started
#pragma once

#include <stdlib.h>

#include <fstream>
#include <random>
#include <string>

namespace tianshu::testing {

inline std::string TestEtcdEndpoints() {
  const char* file = getenv("TIANSHU_TEST_ETCD");
  if (!file || !*file) return "";
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  return line;
}

// A key prefix no other test uses: "/t-<random>/".
inline std::string FreshEtcdPrefix() {
  std::random_device rd;
  return "/t-" + std::to_string(rd()) + "-" + std::to_string(rd()) + "/";
}

}  // namespace tianshu::testing
