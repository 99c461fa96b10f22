#include "testing/chromium.h"

#include <filesystem>

namespace tianshu::testing {

std::string FindChromium() {
  for (const char* p :
       {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"}) {
    if (std::filesystem::exists(p)) return p;
  }
  return "";
}

CommandResult RenderConsole(const std::string& chromium, const std::string& base_url,
                            const std::string& token, const std::string& view,
                            const std::string& png) {
  const std::string url = "'" + base_url + "/#token=" + token + "&view=" + view + "'";
  const std::string flags =
      " --headless --no-sandbox --disable-gpu --disable-background-networking "
      "--disable-component-update --disable-sync --hide-scrollbars --window-size=1300,900 "
      "--virtual-time-budget=6000 --enable-logging=stderr --v=0 ";
  return RunCommand(chromium + flags + "--screenshot=" + png + " --dump-dom " + url);
}

std::string PageProblems(const CommandResult& page) {
  for (const char* bad : {"Content Security Policy", "Uncaught"}) {
    if (page.err.find(bad) != std::string::npos) return page.err;
  }
  return "";
}

}  // namespace tianshu::testing
