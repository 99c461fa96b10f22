// A follower's view of the store (issue 17): a read-only control plane writes nothing, and one
// loaded with an earlier view (ControlPlaneOptions::earlier) takes the specs it parsed for jobs
// whose text did not change, and reads back exactly what a fresh load reads.
#include <gtest/gtest.h>

#include <filesystem>

#include "server_fixture.h"
#include "tianshu/model/load.h"
#include "tianshu/server/control_plane.h"
#include "tianshu/server/requests.h"
#include "tianshu/server/store.h"

namespace tianshu::testing {
namespace {

using json = nlohmann::json;

class FollowerView : public ::testing::Test {
 protected:
  void SetUp() override { db_ = MakeTempDir("tianshu-view") + "/t.db"; }
  void TearDown() override {
    std::filesystem::remove_all(std::filesystem::path(db_).parent_path());
  }
  std::unique_ptr<server::ControlPlane> Open(bool read_only,
                                             std::shared_ptr<const server::ControlPlane> earlier) {
    auto store = server::OpenSqliteStore(db_);
    EXPECT_TRUE(store) << store.error().message;
    if (!store) return nullptr;
    server::ControlPlaneOptions o;
    o.admin_token = kToken;
    o.read_only = read_only;
    o.earlier = std::move(earlier);
    auto cp = server::ControlPlane::Open(std::move(*store), std::move(o), 1'000'000);
    EXPECT_TRUE(cp) << cp.error().message;
    return cp ? std::move(*cp) : nullptr;
  }
  void Submit(server::ControlPlane& cp, const std::string& name) {
    auto req = server::ParseSubmitBody("application/yaml", JobYaml(name, 1), "job.yaml");
    ASSERT_TRUE(req) << req.error().message;
    req->owner = "admin";
    auto made = cp.Submit(std::move(*req), 1'000'000);
    ASSERT_TRUE(made) << made.error().message;
  }
  // Every job's full view, as its owner sees it.
  static json Everything(server::ControlPlane& cp) {
    json out = json::array();
    for (const auto& j : cp.ListJobs({.limit = 10000})["jobs"]) {
      auto full =
          cp.GetJob(j["id"], server::Identity{.name = "admin", .role = server::Role::kAdmin});
      out.push_back(full ? *full : json(full.error().message));
    }
    return out;
  }
  std::string db_;
};

TEST_F(FollowerView, ReusesTheSpecsOfUnchangedJobsAndReadsWhatAFreshLoadReads) {
  {
    auto leader = Open(false, nullptr);
    ASSERT_TRUE(leader);
    for (int i = 0; i < 3; ++i) Submit(*leader, "first-" + std::to_string(i));
  }
  std::shared_ptr<const server::ControlPlane> first = Open(true, nullptr);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->Loaded().jobs, 3);
  EXPECT_EQ(first->Loaded().specs_reused, 0);
  {
    auto leader = Open(false, nullptr);
    ASSERT_TRUE(leader);
    Submit(*leader, "later");
  }
  // A job whose stored spec no longer validates: quarantined, never taken from a view.
  auto store = server::OpenSqliteStore(db_);
  ASSERT_TRUE(store);
  server::Change bad{.jobs = {{"j-000009", 9, "pending",
                               json{{"text", "kind: training\nname: broken\n"},
                                    {"format", "yaml"},
                                    {"state", "pending"}}
                                   .dump()}}};
  ASSERT_TRUE((*store)->Write({&bad}));
  store->reset();
  auto second = Open(true, first);
  auto fresh = Open(true, nullptr);
  ASSERT_TRUE(second && fresh);
  EXPECT_EQ(second->Loaded().jobs, 5);
  EXPECT_EQ(second->Loaded().specs_reused, 3) << "the three unchanged jobs";
  EXPECT_EQ(fresh->Loaded().specs_reused, 0);
  EXPECT_EQ(Everything(*second), Everything(*fresh));
  EXPECT_EQ(second->StartupWarnings(), fresh->StartupWarnings());
  EXPECT_FALSE(second->StartupWarnings().empty()) << "the broken job is quarantined";
  // A view built on a view that held the broken job does not take its (empty) spec.
  auto third = Open(true, std::move(second));
  ASSERT_TRUE(third);
  EXPECT_EQ(third->Loaded().specs_reused, 4);
  EXPECT_EQ(Everything(*third), Everything(*fresh));
}

TEST_F(FollowerView, AReadOnlyViewWritesNothing) {
  {
    auto leader = Open(false, nullptr);
    ASSERT_TRUE(leader);
    Submit(*leader, "one");
  }
  auto view = Open(true, nullptr);
  ASSERT_TRUE(view);
  auto req = server::ParseSubmitBody("application/yaml", JobYaml("two", 1), "job.yaml");
  ASSERT_TRUE(req);
  req->owner = "admin";
  auto made = view->Submit(std::move(*req), 1'000'000);
  ASSERT_FALSE(made) << "a view accepted a job";
  EXPECT_EQ(made.error().status, 503);
  EXPECT_EQ(view->ListJobs({})["jobs"].size(), 1u) << "the refused job is in the view's memory";
  auto again = Open(true, nullptr);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->Loaded().jobs, 1);
}

// Not a follower's matter, but the same opening: a configuration that binds pods, which only
// the simulator models, is refused with its file and line, and nothing is opened.
TEST_F(FollowerView, AServerRefusesThePodBindings) {
  auto v = model::ValidateText("engine.yaml", "scheduler:\n  order: fifo\n  binding: pod-gang\n");
  ASSERT_TRUE(v.diagnostics.empty());
  auto store = server::OpenSqliteStore(db_);
  ASSERT_TRUE(store) << store.error().message;
  server::ControlPlaneOptions o;
  o.admin_token = kToken;
  o.config = std::get<model::EngineConfig>(v.document->value);
  auto cp = server::ControlPlane::Open(std::move(*store), std::move(o), 1'000'000);
  ASSERT_FALSE(cp);
  EXPECT_NE(cp.error().message.find("engine.yaml:3:12: scheduler.binding: pod-gang"),
            std::string::npos)
      << cp.error().message;
  EXPECT_NE(Open(false, nullptr), nullptr);  // the default binds whole jobs
}

}  // namespace
}  // namespace tianshu::testing
