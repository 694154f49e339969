// One JSON object printed as one line on stdout: the benchmarks' output format (rows that sit
// next to the peers' JSON). Keys in insertion order; non-finite numbers and empty optionals are
// written as null.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tilejit::bench {

class JsonLine {
 public:
  JsonLine& add(std::string_view key, std::string_view value) { return raw(key, quoted(value)); }
  JsonLine& add(std::string_view key, const char* value) {
    return add(key, std::string_view(value));
  }
  JsonLine& add(std::string_view key, bool value) { return raw(key, value ? "true" : "false"); }
  JsonLine& add(std::string_view key, int64_t value) { return raw(key, fmt::format("{}", value)); }
  JsonLine& add(std::string_view key, double value) {
    return raw(key, std::isfinite(value) ? fmt::format("{}", value) : "null");
  }
  JsonLine& add(std::string_view key, std::optional<double> value) {
    return value ? add(key, *value) : raw(key, "null");
  }
  JsonLine& add(std::string_view key, const std::vector<int64_t>& values) {
    std::string list = "[";
    for (size_t i = 0; i < values.size(); ++i)
      list += fmt::format("{}{}", i ? ", " : "", values[i]);
    return raw(key, list + "]");
  }

  std::string text() const { return "{" + body_ + "}"; }
  void print() const {  // flushed: a killed run keeps every finished row
    fmt::print("{}\n", text());
    std::fflush(stdout);
  }

 private:
  JsonLine& raw(std::string_view key, std::string_view value) {
    body_ += fmt::format("{}{}: {}", body_.empty() ? "" : ", ", quoted(key), value);
    return *this;
  }
  static std::string quoted(std::string_view s) {
    std::string out = "\"";
    for (char c : s) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\t': out += "\\t"; break;
        default:
          if (static_cast<unsigned char>(c) < 0x20)
            out += fmt::format("\\u{:04x}", int(c));
          else
            out += c;
      }
    }
    return out + "\"";
  }
  std::string body_;
};

}  // namespace tilejit::bench
