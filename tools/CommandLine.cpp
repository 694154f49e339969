#include "tools/CommandLine.h"

#include <charconv>

#include "compiler/Error.h"

namespace tilejit::cli {

CommandLine CommandLine::parse(int argc, char** argv, int first, const std::set<std::string>& valued,
                               const std::set<std::string>& switches) {
  CommandLine cmd;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0 || arg == "--") {
      cmd.positional.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2), value;
    bool inline_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    if (switches.count(name)) {
      TILEJIT_USER_CHECK(!inline_value, "option --{} takes no value", name);
      cmd.flags.insert(name);
    } else if (valued.count(name)) {
      if (!inline_value) {
        TILEJIT_USER_CHECK(i + 1 < argc, "option --{} needs a value", name);
        value = argv[++i];
      }
      cmd.options[name].push_back(value);
    } else {
      user_error("unknown option --{}", name);
    }
  }
  return cmd;
}

std::string CommandLine::get(const std::string& name, const std::string& fallback) const {
  auto it = options.find(name);
  return it == options.end() ? fallback : it->second.back();
}

const std::vector<std::string>& CommandLine::all(const std::string& name) const {
  static const std::vector<std::string> none;
  auto it = options.find(name);
  return it == options.end() ? none : it->second;
}

long long CommandLine::get_int(const std::string& name, long long fallback) const {
  auto it = options.find(name);
  if (it == options.end()) return fallback;
  const std::string& s = it->second.back();
  long long v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  TILEJIT_USER_CHECK(ec == std::errc() && end == s.data() + s.size(),
                     "option --{} needs an integer, got '{}'", name, s);
  return v;
}

}  // namespace tilejit::cli
