#include "runtime/AotManifest.h"

#include <charconv>
#include <fstream>
#include <sstream>

namespace tilejit {

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(s);
  while (std::getline(in, part, sep)) parts.push_back(part);
  return parts;
}

void parse_option(const std::string& word, AotManifestEntry& entry, const std::string& where) {
  size_t eq = word.find('=');
  TILEJIT_USER_CHECK(eq != std::string::npos, "{}: expected dtype=... or head_dim=..., got '{}'",
                     where, word);
  std::string name = word.substr(0, eq);
  std::vector<std::string> values = split(word.substr(eq + 1), ',');
  TILEJIT_USER_CHECK(!values.empty(), "{}: {}= needs at least one value", where, name);
  for (const std::string& v : values) {
    if (name == "dtype") {
      TILEJIT_USER_CHECK(v == "bf16" || v == "fp16", "{}: dtype must be bf16 or fp16, got '{}'",
                         where, v);
      entry.dtypes.push_back(v == "bf16" ? DType::BF16 : DType::F16);
    } else if (name == "head_dim") {
      int d = 0;
      auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), d);
      TILEJIT_USER_CHECK(ec == std::errc() && end == v.data() + v.size() && d > 0,
                         "{}: head_dim needs positive integers, got '{}'", where, v);
      entry.head_dims.push_back(d);
    } else {
      user_error("{}: unknown option '{}' (dtype=, head_dim=)", where, name);
    }
  }
}

}  // namespace

std::vector<AotManifestEntry> parse_aot_manifest(std::string_view text,
                                                 const std::filesystem::path& base_dir,
                                                 const std::string& file) {
  std::vector<AotManifestEntry> entries;
  std::istringstream lines{std::string(text)};
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    if (size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string word;
    if (!(words >> word)) continue;
    AotManifestEntry entry;
    entry.line = number;
    entry.program_file = base_dir / word;  // an absolute path replaces base_dir
    std::string where = fmt::format("{}:{}", file, number);
    while (words >> word) parse_option(word, entry, where);
    if (entry.dtypes.empty()) entry.dtypes.push_back(DType::BF16);
    if (entry.head_dims.empty()) entry.head_dims.push_back(128);
    entries.push_back(std::move(entry));
  }
  return entries;
}

std::vector<AotManifestEntry> load_aot_manifest(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  TILEJIT_USER_CHECK(in.good(), "cannot read manifest '{}'", path.string());
  std::stringstream text;
  text << in.rdbuf();
  return parse_aot_manifest(text.str(), path.parent_path(), path.string());
}

std::string variant_label(const ParsedProgram& program, const KernelVariantOptions& variant) {
  std::string dtype = variant.dtype == DType::BF16 ? "bf16" : "fp16";
  if (std::holds_alternative<LossProgram>(program)) return dtype;
  return fmt::format("{} d{}", dtype, variant.head_dim);
}

}  // namespace tilejit
