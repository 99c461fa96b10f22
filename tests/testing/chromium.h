// Headless Chromium for the tests that look at a page the way a user does (Debian's `chromium`;
// such tests skip without it and carry the CTest label `chromium`).
//   std::string chromium = FindChromium();
//   if (chromium.empty()) GTEST_SKIP() << "chromium is not installed";
//   CommandResult page = RenderConsole(chromium, "http://127.0.0.1:8080", token, "network", png);
#pragma once

#include <string>

#include "testing/run_command.h"

namespace tianshu::testing {

// The first Chromium installed, or "" when there is none.
std::string FindChromium();

// The DOM (out) and the browser's log (err) of the console at `base_url` once the page has logged
// in with `token` (in the URL fragment, as users do) and shown `view`; a screenshot goes to `png`.
// The page gets six seconds of virtual time: enough for its first redraw.
CommandResult RenderConsole(const std::string& chromium, const std::string& base_url,
                            const std::string& token, const std::string& view,
                            const std::string& png);

// Console messages a rendered page must not show: a refusal by the content security policy, a
// script error. "" when there is none.
std::string PageProblems(const CommandResult& page);

}  // namespace tianshu::testing
