#include "tests/attention/AttentionTestSupport.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace tilejit::testing {

namespace {

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  u += 0x7fff + ((u >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}
float from_bf16(uint16_t b) {
  uint32_t u = uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

TestTensor::TestTensor(DType dtype, std::vector<int64_t> shape, bool bshd, std::string name)
    : dtype_(dtype), shape_(std::move(shape)), name_(std::move(name)) {
  strides_ = TensorView::contiguous_strides(shape_);
  if (bshd && shape_.size() == 4) {  // storage [B, S, H, D]
    int64_t H = shape_[1], S = shape_[2], D = shape_[3];
    strides_ = {S * H * D, D, H * D, 1};
  }
  bytes_.assign(static_cast<size_t>(numel()) * dtype_size(dtype_), 0);
}

int64_t TestTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

int64_t TestTensor::storage_index(int64_t i) const {
  int64_t at = 0;
  for (int d = static_cast<int>(shape_.size()) - 1; d >= 0; --d) {
    at += (i % shape_[d]) * strides_[d];
    i /= shape_[d];
  }
  return at;
}

double TestTensor::get(int64_t i) const {
  const unsigned char* p = bytes_.data() + storage_index(i) * dtype_size(dtype_);
  switch (dtype_) {
    case DType::F32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::BF16: {
      uint16_t b;
      std::memcpy(&b, p, 2);
      return from_bf16(b);
    }
    case DType::F16: {
      _Float16 h;
      std::memcpy(&h, p, 2);
      return static_cast<float>(h);
    }
    case DType::I32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::I64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    case DType::U8:
    case DType::Bool: return *p;
  }
  return 0;
}

void TestTensor::set(int64_t i, double v) {
  unsigned char* p = bytes_.data() + storage_index(i) * dtype_size(dtype_);
  switch (dtype_) {
    case DType::F32: {
      float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      break;
    }
    case DType::BF16: {
      uint16_t b = to_bf16(static_cast<float>(v));
      std::memcpy(p, &b, 2);
      break;
    }
    case DType::F16: {
      _Float16 h = static_cast<_Float16>(v);
      std::memcpy(p, &h, 2);
      break;
    }
    case DType::I32: {
      int32_t x = static_cast<int32_t>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case DType::I64: {
      int64_t x = static_cast<int64_t>(v);
      std::memcpy(p, &x, 8);
      break;
    }
    case DType::U8:
    case DType::Bool: *p = static_cast<unsigned char>(v); break;
  }
}

void TestTensor::fill_random(std::mt19937_64& rng, double amp) {
  std::uniform_real_distribution<double> u(-amp, amp);
  for (int64_t i = 0; i < numel(); ++i) set(i, u(rng));
}

void TestTensor::fill(double v) {
  for (int64_t i = 0; i < numel(); ++i) set(i, v);
}

std::vector<double> TestTensor::values() const {
  std::vector<double> out(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) out[static_cast<size_t>(i)] = get(i);
  return out;
}

TensorView TestTensor::host_view() {
  return {bytes_.data(), dtype_, shape_, strides_, TensorView::Where::Host, name_};
}

TensorView TestTensor::device_view() {
  if (device_.bytes() == 0) upload();
  return {device_.data(), dtype_, shape_, strides_, TensorView::Where::Device, name_};
}

void TestTensor::upload() {
  if (device_.bytes() == 0) device_ = DeviceBuffer(std::max<size_t>(bytes_.size(), 16));
  if (!bytes_.empty()) device_.copy_from_host(bytes_.data(), bytes_.size());
}

void TestTensor::download() {
  if (!bytes_.empty()) device_.copy_to_host(bytes_.data(), bytes_.size());
}

void TestTensor::poison_device() {
  if (device_.bytes() == 0) upload();
  device_.fill_bytes(0xFF);
}

BoundValues bind_random(const AttentionProgram& p, int batch, int heads, int seq,
                        std::mt19937_64& rng, bool on_device) {
  BoundValues out;
  for (const BufferDecl& d : p.buffers) {
    std::vector<int64_t> shape;
    for (const std::string& dim : d.dims)
      shape.push_back(dim == "B" ? batch : dim == "H" ? heads : dim == "S" ? seq : 7);
    auto t = std::make_unique<TestTensor>(dtype_of(d.elem), shape, false, d.name);
    if (d.elem == ElemType::I32) {
      // Sorted small ids along the last axis (document-like); a new id every 20..200 positions.
      std::uniform_int_distribution<int> len(20, 200);
      int64_t inner = shape.empty() ? 1 : shape.back();
      for (int64_t row = 0; row < t->numel() / std::max<int64_t>(inner, 1); ++row)
        for (int64_t j = 0, id = 0, left = len(rng); j < inner; ++j, --left) {
          if (left == 0) ++id, left = len(rng);
          t->set(row * inner + j, static_cast<double>(id));
        }
    } else {
      t->fill_random(rng, 1.0);
    }
    out.host.buffer(d.name, t->host_view());
    if (on_device) out.device.buffer(d.name, t->device_view());
    out.buffers.push_back(std::move(t));
  }
  for (const ParamDecl& d : p.params) {
    if (d.type == Type::I32) {
      int32_t v = std::uniform_int_distribution<int32_t>(1, 8)(rng);
      out.host.param(d.name, v);
      out.device.param(d.name, v);
    } else {
      float v = static_cast<float>(std::uniform_real_distribution<double>(0.5, 4.0)(rng));
      out.host.param(d.name, v);
      out.device.param(d.name, v);
    }
  }
  return out;
}

ReferenceHooks reference_hooks(const LoweredAttention& p, const EvalContext& ctx) {
  ReferenceHooks r;
  if (!p.mask_is_true) r.mask = std::make_shared<CompiledEval>(p.program.mask, ctx);
  if (!p.score_is_identity) {
    r.score = std::make_shared<CompiledEval>(p.program.score, ctx);
    r.grad = std::make_shared<CompiledEval>(p.score_grad, ctx);
  }
  return r;
}

AttentionRefHooks ReferenceHooks::hooks() const {
  AttentionRefHooks h;
  if (mask)
    h.mask = [m = mask](int b, int hh, int q, int kv) { return m->eval_mask(b, hh, q, kv); };
  if (score)
    h.score = [s = score](double x, int b, int hh, int q, int kv) {
      return s->eval_score(x, b, hh, q, kv);
    };
  if (grad)
    h.score_grad = [g = grad](double x, int b, int hh, int q, int kv) {
      return g->eval_score(x, b, hh, q, kv);
    };
  return h;
}

double rel_l2(const std::vector<double>& got, const std::vector<double>& want, double floor) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (std::isnan(got[i])) return std::numeric_limits<double>::infinity();
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  return std::sqrt(num) / std::max(std::sqrt(den), floor);
}

}  // namespace tilejit::testing
