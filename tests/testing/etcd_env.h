// Where the tests' etcd is (tests/testing/etcd.sh, started by a CTest fixture): the file named
// by TIANSHU_TEST_ETCD holds its client endpoints, "host:port,host:port".
//   auto endpoints = testing::TestEtcdEndpoints();   // "" when no etcd was started
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <random>
#include <string>
#include <vector>

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

// Under `tianshu_test_on_etcd` (CMake), TIANSHU_TEST_STORE_ETCD names the tests' etcd: each
// fixture's servers keep their state there, under a prefix of their own (a restart in the same
// test finds it again).
inline std::string TestStoreUrl() {
  const char* file = getenv("TIANSHU_TEST_STORE_ETCD");
  if (!file || !*file) return "";
  setenv("TIANSHU_TEST_ETCD", file, 1);
  const std::string endpoints = TestEtcdEndpoints();
  EXPECT_FALSE(endpoints.empty()) << "no etcd endpoints in " << file;
  return "etcd://" + endpoints + FreshEtcdPrefix();
}
// True when servers keep their state in etcd (a test of the SQLite file itself skips).
inline bool StoreIsEtcd() {
  const char* file = getenv("TIANSHU_TEST_STORE_ETCD");
  return file && *file;
}

// The flags that put a `tianshu serve` a test spawns on that store (none on SQLite), under a
// prefix of its own; a server restarted with the same flags leads once its predecessor's lease
// (2 s) ran out.
inline std::vector<std::string> ServeStoreFlags() {
  const std::string url = TestStoreUrl();
  if (url.empty()) return {};
  return {"--store", url, "--leader-lease", "2s"};
}

// `tianshu serve` on 127.0.0.1:PORT with its data in DATA, then `flags`, then ServeStoreFlags():
// the command line of a test's server, on the store the test runs against.
inline std::vector<std::string> ServeCommand(const std::string& binary, int port,
                                             const std::string& data,
                                             const std::vector<std::string>& flags) {
  std::vector<std::string> out = {
      binary, "serve", "--listen", "127.0.0.1:" + std::to_string(port), "--data", data};
  out.insert(out.end(), flags.begin(), flags.end());
  for (const std::string& f : ServeStoreFlags()) out.push_back(f);
  return out;
}

}  // namespace tianshu::testing
