#include "tests/compiler/RandomBindings.h"

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <cstring>

namespace tilejit::testing {

int64_t dim_size(const std::string& dim) {
  if (dim == "B") return 2;
  if (dim == "H") return 3;
  if (dim == "S") return 9;
  if (dim == "N") return 5;
  if (dim == "V") return 17;
  return 4;
}

namespace {
double uniform(std::mt19937_64& rng, double lo, double hi) {
  return lo + (hi - lo) * (static_cast<double>(rng() >> 11) * 0x1.0p-53);
}
int64_t pick_index(std::mt19937_64& rng, int64_t size) {
  // One point in eight is just outside the range.
  if (rng() % 8 == 0) return rng() % 2 ? -1 : size;
  return static_cast<int64_t>(rng() % static_cast<uint64_t>(size));
}
}  // namespace

RandomBindings::RandomBindings(std::mt19937_64& rng, const std::vector<BufferDecl>& buffers,
                               const std::vector<ParamDecl>& params) {
  for (const BufferDecl& b : buffers) {
    BufferView view;
    view.elem = b.elem;
    int64_t count = 1;
    for (const std::string& d : b.dims) {
      view.sizes.push_back(dim_size(d));
      count *= dim_size(d);
    }
    std::vector<unsigned char> bytes(count * elem_size(b.elem));
    for (int64_t i = 0; i < count; ++i) {
      unsigned char* p = bytes.data() + i * elem_size(b.elem);
      switch (b.elem) {
        case ElemType::I32: {
          int32_t v = static_cast<int32_t>(rng() % 14) - 3;
          std::memcpy(p, &v, 4);
          break;
        }
        case ElemType::F32: {
          float v = static_cast<float>(uniform(rng, -4, 4));
          std::memcpy(p, &v, 4);
          break;
        }
        case ElemType::BF16: {
          uint16_t v = static_cast<uint16_t>(
              std::bit_cast<uint32_t>(static_cast<float>(uniform(rng, -4, 4))) >> 16);
          std::memcpy(p, &v, 2);
          break;
        }
        case ElemType::F16: {
          // Sign, an exponent for magnitudes 2^-6 .. 2^4 (and now and then a subnormal), mantissa.
          uint16_t exponent = rng() % 16 == 0 ? 0 : static_cast<uint16_t>(9 + rng() % 11);
          uint16_t v =
              static_cast<uint16_t>(((rng() % 2) << 15) | (exponent << 10) | (rng() % 1024));
          std::memcpy(p, &v, 2);
          break;
        }
      }
    }
    view.data = bytes.data();  // the vector's heap block does not move with the vector
    storage_.push_back(std::move(bytes));
    base_.buffers[b.name] = std::move(view);
  }
  for (const ParamDecl& p : params) {
    if (p.type == Type::I32)
      base_.params[p.name] = static_cast<int64_t>(rng() % 11) - 3;
    else
      base_.params[p.name] = uniform(rng, -3, 3);
  }
}

EvalContext RandomBindings::point(std::mt19937_64& rng, FloatPrecision precision) const {
  EvalContext c = base_;
  c.precision = precision;
  c.b = pick_index(rng, dim_size("B"));
  c.h = pick_index(rng, dim_size("H"));
  c.q = pick_index(rng, dim_size("S"));
  c.kv = pick_index(rng, dim_size("S"));
  c.row = pick_index(rng, dim_size("N"));
  c.id = pick_index(rng, dim_size("V"));
  c.score = static_cast<float>(uniform(rng, -8, 8));
  c.logit = static_cast<float>(uniform(rng, -8, 8));
  return c;
}

bool same_value(const Value& a, const Value& b) {
  if (a.type != b.type) return false;
  switch (a.type) {
    case Type::Bool: return a.b == b.b;
    case Type::I32: return a.i == b.i;
    case Type::F32:
      if (std::isnan(a.f) || std::isnan(b.f)) return std::isnan(a.f) && std::isnan(b.f);
      return std::bit_cast<uint64_t>(a.f) == std::bit_cast<uint64_t>(b.f);
  }
  return false;
}

std::string show(const Value& v) {
  switch (v.type) {
    case Type::Bool: return v.b ? "true" : "false";
    case Type::I32: return fmt::format("{} : i32", v.i);
    case Type::F32: return fmt::format("{} : f32", v.f);
  }
  return "?";
}

}  // namespace tilejit::testing
