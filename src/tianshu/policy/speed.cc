#include "tianshu/policy/speed.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "tianshu/placement/fit.h"

namespace tianshu::policy {

namespace {

struct Choice {
  std::string model;
  model::Backend backend = model::Backend::kCuda;
  double peak_tflops = 0;
};

class BySpeed final : public placement::Strategy {
 public:
  explicit BySpeed(std::unique_ptr<placement::Strategy> inner) : inner_(std::move(inner)) {}
  std::string_view Name() const override { return "by-speed"; }

  placement::Outcome Place(const model::ClusterState& snapshot,
                           const placement::PlacementRequest& request) const override {
    // Accepted models of the cluster, fastest first.
    std::vector<Choice> models;
    for (const model::ServerType& t : snapshot.topology().types) {
      if (request.backend && *request.backend != t.backend) continue;
      if (!request.accelerators.empty() &&
          !placement::ModelAccepted(request, t.accelerator.model)) {
        continue;
      }
      bool seen = std::any_of(models.begin(), models.end(),
                              [&](const Choice& c) { return c.model == t.accelerator.model; });
      if (!seen) models.push_back({t.accelerator.model, t.backend, t.accelerator.peak_tflops});
    }
    if (models.size() <= 1) return inner_->Place(snapshot, request);
    std::sort(models.begin(), models.end(), [](const Choice& a, const Choice& b) {
      return std::tuple(-a.peak_tflops, a.model) < std::tuple(-b.peak_tflops, b.model);
    });
    bool later = false;
    std::string reasons;
    auto attempt = [&](const placement::PlacementRequest& r, const std::string& what,
                       placement::Outcome* out) {
      placement::Outcome o = inner_->Place(snapshot, r);
      if (o.placed()) {
        o.reason = "fastest accepted choice that fits now: " + what;
        *out = std::move(o);
        return true;
      }
      if (o.kind == placement::OutcomeKind::kDoesNotFitNow) later = true;
      reasons += (reasons.empty() ? "" : "; ") + what + ": " + o.reason;
      return false;
    };
    placement::Outcome out;
    for (const Choice& c : models) {
      placement::PlacementRequest r = request;
      r.accelerators = {c.model};
      r.backend = c.backend;
      if (attempt(r, c.model, &out)) return out;
    }
    // No single model can hold it now: one backend at a time, models mixed, the backend of the
    // fastest model first.
    std::vector<model::Backend> backends;
    for (const Choice& c : models) {
      if (std::find(backends.begin(), backends.end(), c.backend) == backends.end()) {
        backends.push_back(c.backend);
      }
    }
    for (model::Backend b : backends) {
      placement::PlacementRequest r = request;
      r.backend = b;
      r.accelerators.clear();
      for (const Choice& c : models) {
        if (c.backend == b) r.accelerators.push_back(c.model);
      }
      if (r.accelerators.size() < 2) continue;  // tried above
      if (attempt(r, std::string(model::BackendName(b)) + " models mixed", &out)) {
        return out;
      }
    }
    out = placement::Outcome{};
    out.kind =
        later ? placement::OutcomeKind::kDoesNotFitNow : placement::OutcomeKind::kCanNeverFit;
    out.reason = reasons;
    return out;
  }

 private:
  std::unique_ptr<placement::Strategy> inner_;
};

}  // namespace

Result<std::unique_ptr<placement::Strategy>> MakeBySpeedStrategy(
    const std::string& inner, const placement::StrategyOptions& options) {
  auto s = placement::MakeStrategy(inner, options);
  if (!s) return std::unexpected(s.error());
  return std::unique_ptr<placement::Strategy>(new BySpeed(std::move(*s)));
}

}  // namespace tianshu::policy
