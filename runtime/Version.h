// tilejit's own version: part of every kernel-cache key and AOT bundle index.
#pragma once

#include <string_view>

namespace tilejit {
std::string_view version();
// Bumped whenever the on-disk cache entry format changes.
inline constexpr int kCacheFormatVersion = 1;
}  // namespace tilejit
