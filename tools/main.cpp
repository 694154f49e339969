// The `tilejit` command-line tool: compile and inspect programs, run the demo.
// Exit codes: 0 success, 1 a user error (bad program, bad option, compile error), 2 usage,
// 70 an internal error.
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>

#include "compiler/Error.h"
#include "runtime/Nvrtc.h"
#include "runtime/Version.h"
#include "tools/CommandLine.h"

namespace {

constexpr const char* kUsage =
    "usage: tilejit <command> [options]\n"
    "  --version                     print the tilejit and NVRTC versions\n"
    "  compile FILE.tj [--arch sm_80|sm_90a] [--emit ir|cuda|ptx|cubin] [--out PATH]\n"
    "                                print the IR after passes or the generated CUDA, or compile\n"
    "                                every kernel the program needs (through the kernel cache)\n"
    "  blockmask FILE.tj --seq-q N --seq-kv M [--batch B] [--heads H] [--bind NAME=FILE.bin]\n"
    "            [--param NAME=VALUE] [--json] [--refine]\n"
    "                                classify tiles (mask analysis) and print the block mask's size\n"
    "  aot MANIFEST --arch sm_80,sm_90a --out DIR [--jobs N] [--plain]\n"
    "                                compile every kernel of a manifest's programs into a bundle\n"
    "                                (DIR/index.json); use it with TILEJIT_CACHE_DIR=DIR TILEJIT_OFFLINE=1\n"
    "  cache ls|verify|prune [--dir DIR] [--fix] [--max-bytes N] [--older-than DAYS] [--dry-run]\n"
    "                                list, check (--fix removes bad entries) or trim a kernel cache\n"
    "  demo [--quick]                compile the standard programs and run attention and a loss\n";

int dispatch(int argc, char** argv) {
  using namespace tilejit::cli;
  std::string_view command = argc > 1 ? argv[1] : "";
  if (command == "--version" || command == "version") {
    std::printf("tilejit %s (NVRTC %s)\n", std::string(tilejit::version()).c_str(),
                tilejit::nvrtc_version().c_str());
    return 0;
  }
  if (command == "compile")
    return run_compile(CommandLine::parse(argc, argv, 2, {"arch", "emit", "out", "dtype", "head-dim"}, {}));
  if (command == "blockmask")
    return run_blockmask(CommandLine::parse(
        argc, argv, 2,
        {"seq-q", "seq-kv", "batch", "heads", "block-q", "block-kv", "bind", "param", "threads"},
        {"json", "refine"}));
  if (command == "aot")
    return run_aot(CommandLine::parse(argc, argv, 2, {"arch", "out", "jobs"}, {"plain"}));
  if (command == "cache")
    return run_cache(CommandLine::parse(argc, argv, 2, {"dir", "max-bytes", "older-than"},
                                        {"fix", "dry-run"}));
  if (command == "demo") return run_demo(CommandLine::parse(argc, argv, 2, {}, {"quick"}));
  std::fputs(kUsage, command == "--help" || command == "help" ? stdout : stderr);
  return command == "--help" || command == "help" ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return dispatch(argc, argv);
  } catch (const tilejit::InternalError& e) {
    std::fprintf(stderr, "tilejit: %s\n", e.what());
    return 70;
  } catch (const tilejit::Error& e) {  // user errors, compile errors, offline misses, CUDA errors
    std::fprintf(stderr, "tilejit: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tilejit: internal error: %s\n", e.what());
    return 70;
  }
}
