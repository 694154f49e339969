// SHA-256 (FIPS 180-4): program identities and kernel-cache keys and checksums.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace tilejit {

class Sha256 {
 public:
  Sha256();
  Sha256& update(const void* data, size_t n);
  Sha256& update(std::string_view s) { return update(s.data(), s.size()); }
  // Length-prefixed field: concatenations of fields can never collide ("ab","c" vs "a","bc").
  Sha256& field(std::string_view s);
  std::array<uint8_t, 32> digest();
  std::string hex_digest();

 private:
  void block(const uint8_t* p);
  std::array<uint32_t, 8> h_;
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

std::string sha256_hex(std::string_view data);

}  // namespace tilejit
