#include "runtime/BundleIndex.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include "runtime/CacheEntry.h"
#include "runtime/Nvrtc.h"
#include "runtime/Version.h"

namespace tilejit {

namespace {

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<int>(c));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// Reads the JSON string starting at text[pos] (the opening quote); advances pos past it.
std::optional<std::string> read_string(std::string_view text, size_t& pos) {
  if (pos >= text.size() || text[pos] != '"') return std::nullopt;
  std::string out;
  for (++pos; pos < text.size(); ++pos) {
    char c = text[pos];
    if (c == '"') {
      ++pos;
      return out;
    }
    if (c != '\\') {
      out += c;
      continue;
    }
    if (++pos >= text.size()) return std::nullopt;
    switch (char e = text[pos]) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case 'u':
        if (pos + 4 >= text.size()) return std::nullopt;
        out += static_cast<char>(std::stoi(std::string(text.substr(pos + 1, 4)), nullptr, 16));
        pos += 4;
        break;
      default: out += e;
    }
  }
  return std::nullopt;
}

// The position just after `"name":` and any spaces, or npos.
size_t value_position(std::string_view text, std::string_view name) {
  std::string needle = quote(name) + ":";
  size_t at = text.find(needle);
  if (at == std::string_view::npos) return at;
  at += needle.size();
  while (at < text.size() && text[at] == ' ') ++at;
  return at;
}

std::optional<std::string> string_field(std::string_view text, std::string_view name) {
  size_t at = value_position(text, name);
  if (at == std::string_view::npos) return std::nullopt;
  return read_string(text, at);
}

std::optional<std::vector<std::string>> list_field(std::string_view text, std::string_view name) {
  size_t at = value_position(text, name);
  if (at == std::string_view::npos || at >= text.size() || text[at] != '[') return std::nullopt;
  std::vector<std::string> out;
  ++at;
  while (at < text.size()) {
    while (at < text.size() && (text[at] == ' ' || text[at] == ',')) ++at;
    if (at < text.size() && text[at] == ']') return out;
    auto s = read_string(text, at);
    if (!s) return std::nullopt;
    out.push_back(std::move(*s));
  }
  return std::nullopt;
}

std::string kernel_line(const BundleKernel& k) {
  std::string entries;
  for (const auto& e : k.entry_points) entries += (entries.empty() ? "" : ", ") + quote(e);
  return fmt::format(
      "{{\"program\": {}, \"program_hash\": {}, \"variant\": {}, \"kernel\": {}, \"arch\": {}, "
      "\"key\": {}, \"entry_points\": [{}]}}",
      quote(k.program), quote(k.program_hash), quote(k.variant), quote(k.kernel), quote(k.arch),
      quote(k.key), entries);
}

auto identity(const BundleKernel& k) {
  return std::tie(k.program_hash, k.variant, k.kernel, k.arch, k.key);
}

}  // namespace

std::string format_bundle_index(const BundleIndex& index) {
  std::string out = fmt::format(
      "{{\n  \"tilejit_version\": {},\n  \"nvrtc_version\": {},\n  \"cache_format_version\": "
      "\"{}\",\n  \"kernels\": [\n",
      quote(index.tilejit_version), quote(index.nvrtc_version), index.cache_format_version);
  for (size_t i = 0; i < index.kernels.size(); ++i) {
    out += "    " + kernel_line(index.kernels[i]) + (i + 1 < index.kernels.size() ? ",\n" : "\n");
  }
  return out + "  ]\n}\n";
}

BundleIndex parse_bundle_index(std::string_view text, const std::string& file) {
  size_t kernels_at = text.find("\"kernels\":");
  TILEJIT_USER_CHECK(kernels_at != std::string_view::npos,
                     "{} is not a tilejit bundle index (no \"kernels\" list)", file);
  std::string_view head = text.substr(0, kernels_at);
  BundleIndex index;
  auto tilejit = string_field(head, "tilejit_version");
  auto nvrtc = string_field(head, "nvrtc_version");
  auto format = string_field(head, "cache_format_version");
  TILEJIT_USER_CHECK(tilejit && nvrtc && format,
                     "{} is not a tilejit bundle index (no tilejit, NVRTC or format version)",
                     file);
  index.tilejit_version = *tilejit;
  index.nvrtc_version = *nvrtc;
  index.cache_format_version = std::atoi(format->c_str());

  std::istringstream lines{std::string(text.substr(kernels_at))};
  std::string line;
  std::getline(lines, line);  // "kernels": [
  while (std::getline(lines, line)) {
    if (line.find('{') == std::string::npos) continue;
    BundleKernel k;
    auto program = string_field(line, "program"), hash = string_field(line, "program_hash"),
         variant = string_field(line, "variant"), kernel = string_field(line, "kernel"),
         arch = string_field(line, "arch"), key = string_field(line, "key");
    auto entries = list_field(line, "entry_points");
    TILEJIT_USER_CHECK(program && hash && variant && kernel && arch && key && entries,
                       "{}: malformed kernel line: {}", file, line);
    index.kernels.push_back({*program, *hash, *variant, *kernel, *arch, *key, *entries});
  }
  return index;
}

std::optional<BundleIndex> read_bundle_index(const std::filesystem::path& dir) {
  std::filesystem::path file = dir / kBundleIndexFile;
  std::ifstream in(file, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return parse_bundle_index(text.str(), file.string());
}

std::string update_bundle_index(const std::filesystem::path& dir,
                                const std::vector<BundleKernel>& kernels) {
  if (std::string problem = make_private_directories(dir); !problem.empty()) return problem;
  CacheFileLock lock(dir / "index.lock");
  BundleIndex index{std::string(version()), nvrtc_version(), kCacheFormatVersion, {}};
  std::set<std::tuple<std::string, std::string, std::string, std::string, std::string>> seen;
  auto add = [&](const BundleKernel& k) {
    if (seen.insert(identity(k)).second) index.kernels.push_back(k);
  };
  for (const BundleKernel& k : kernels) add(k);
  // Earlier runs' kernels stay listed while their entries exist and were made by this tilejit.
  try {
    if (auto old = read_bundle_index(dir); old && old->tilejit_version == index.tilejit_version &&
                                           old->nvrtc_version == index.nvrtc_version &&
                                           old->cache_format_version == kCacheFormatVersion) {
      for (const BundleKernel& k : old->kernels) {
        if (std::filesystem::exists(dir / (k.key + ".tjk"))) add(k);
      }
    }
  } catch (const UserError&) {
    // An unreadable old index is replaced by this run's.
  }
  std::sort(index.kernels.begin(), index.kernels.end(),
            [](const BundleKernel& a, const BundleKernel& b) {
              return std::tie(a.program, a.variant, a.arch, a.kernel) <
                     std::tie(b.program, b.variant, b.arch, b.kernel);
            });
  std::string text = format_bundle_index(index);
  std::filesystem::path temp = dir / fmt::format("index.json.tmp.{}", ::getpid());
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) return fmt::format("cannot write {}", temp.string());
  }
  std::error_code ec;
  std::filesystem::rename(temp, dir / kBundleIndexFile, ec);
  if (ec)
    return fmt::format("cannot write {}: {}", (dir / kBundleIndexFile).string(), ec.message());
  return {};
}

void check_bundle_versions(const std::filesystem::path& dir) {
  std::optional<BundleIndex> index = read_bundle_index(dir);
  if (!index) return;
  std::string file = (dir / kBundleIndexFile).string();
  if (index->tilejit_version != version()) {
    throw BundleVersionMismatch(fmt::format(
        "kernel bundle {} was built by tilejit {}, this is tilejit {}: rebuild it with this "
        "version's `tilejit aot`",
        file, index->tilejit_version, version()));
  }
  if (index->nvrtc_version != nvrtc_version()) {
    throw BundleVersionMismatch(fmt::format(
        "kernel bundle {} was built with NVRTC {}, this process has NVRTC {}: rebuild it with "
        "`tilejit aot` on this NVRTC",
        file, index->nvrtc_version, nvrtc_version()));
  }
  if (index->cache_format_version != kCacheFormatVersion) {
    throw BundleVersionMismatch(fmt::format(
        "kernel bundle {} has cache format {}, this tilejit reads format {}: rebuild it", file,
        index->cache_format_version, kCacheFormatVersion));
  }
}

}  // namespace tilejit
