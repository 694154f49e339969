// Argument parsing for the `tilejit` tool: positionals plus `--name value` options and `--flag`s.
// Unknown options and missing values are user errors that name the option.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

namespace tilejit::cli {

struct CommandLine {
  std::vector<std::string> positional;
  std::map<std::string, std::vector<std::string>> options;  // repeated options keep every value
  std::set<std::string> flags;

  // Parses argv[first..]; `valued` and `switches` list the accepted names without dashes.
  static CommandLine parse(int argc, char** argv, int first, const std::set<std::string>& valued,
                           const std::set<std::string>& switches);

  bool has(const std::string& name) const { return options.count(name) || flags.count(name); }
  std::string get(const std::string& name, const std::string& fallback = "") const;
  const std::vector<std::string>& all(const std::string& name) const;
  long long get_int(const std::string& name, long long fallback) const;
};

// Each subcommand: returns the process exit code.
int run_compile(const CommandLine& cmd);
int run_demo(const CommandLine& cmd);
int run_blockmask(const CommandLine& cmd);
int run_aot(const CommandLine& cmd);
int run_cache(const CommandLine& cmd);

}  // namespace tilejit::cli
