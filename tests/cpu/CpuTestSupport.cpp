#include "tests/cpu/CpuTestSupport.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "runtime/cpu/HostRows.h"

namespace tilejit::testing {

HostTensor HostTensor::make(DType dtype, std::vector<int64_t> shape, std::string name,
                            std::vector<int64_t> strides) {
  HostTensor t;
  t.view = TensorView::contiguous(nullptr, dtype, std::move(shape), TensorView::Where::Host,
                                  std::move(name));
  if (!strides.empty()) t.view.strides = std::move(strides);
  int64_t span = 1;
  for (int i = 0; i < t.view.rank(); ++i) span += (t.view.shape[i] - 1) * t.view.strides[i];
  t.bytes.assign(std::max<int64_t>(span, 1) * dtype_size(dtype), 0);
  t.view.data = t.bytes.data();
  return t;
}

double HostTensor::get(int64_t i) const {
  const unsigned char* p = bytes.data() + i * dtype_size(view.dtype);
  uint16_t h;
  switch (view.dtype) {
    case DType::F32: { float f; std::memcpy(&f, p, 4); return f; }
    case DType::I32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case DType::I64: { int64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
    case DType::BF16: std::memcpy(&h, p, 2); return cpu::bf16_to_float(h);
    case DType::F16: std::memcpy(&h, p, 2); return cpu::f16_to_float(h);
    default: return p[0];
  }
}

void HostTensor::set(int64_t i, double v) {
  unsigned char* p = bytes.data() + i * dtype_size(view.dtype);
  uint16_t h;
  switch (view.dtype) {
    case DType::F32: { float f = static_cast<float>(v); std::memcpy(p, &f, 4); return; }
    case DType::I32: { int32_t x = static_cast<int32_t>(v); std::memcpy(p, &x, 4); return; }
    case DType::I64: { int64_t x = static_cast<int64_t>(v); std::memcpy(p, &x, 8); return; }
    case DType::BF16: h = cpu::float_to_bf16(static_cast<float>(v)); std::memcpy(p, &h, 2); return;
    case DType::F16: h = cpu::float_to_f16(static_cast<float>(v)); std::memcpy(p, &h, 2); return;
    default: p[0] = static_cast<unsigned char>(v); return;
  }
}

double HostTensor::at(const std::vector<int64_t>& index) const {
  int64_t off = 0;
  for (size_t i = 0; i < index.size(); ++i) off += index[i] * view.strides[i];
  return get(off);
}

void HostTensor::fill(double v) {
  for (int64_t i = 0; i < storage_elems(); ++i) set(i, v);
}

HostTensor make_attention_tensor(DType dtype, int b, int h, int s, int d, bool bshd, std::string name) {
  if (!bshd) return HostTensor::make(dtype, {b, h, s, d}, std::move(name));
  return HostTensor::make(dtype, {b, h, s, d}, std::move(name),
                          {int64_t{s} * h * d, d, int64_t{h} * d, 1});
}

void fill_random(HostTensor& t, std::mt19937_64& rng, double amp) {
  std::uniform_real_distribution<double> u(-amp, amp);
  for (int64_t i = 0; i < t.storage_elems(); ++i) t.set(i, u(rng));
}

std::vector<double> to_doubles(const HostTensor& t) {
  const auto& s = t.view.shape;
  std::vector<double> out;
  out.reserve(t.view.numel());
  for (int64_t a = 0; a < s[0]; ++a)
    for (int64_t b = 0; b < s[1]; ++b)
      for (int64_t c = 0; c < s[2]; ++c)
        for (int64_t d = 0; d < s[3]; ++d) out.push_back(t.at({a, b, c, d}));
  return out;
}

BoundValues bind_random(const std::vector<BufferDecl>& buffers, const std::vector<ParamDecl>& params,
                        const std::map<std::string, int64_t>& dims, std::mt19937_64& rng) {
  BoundValues out;
  int64_t largest = 1;
  for (const auto& [name, size] : dims) largest = std::max(largest, size);
  for (const BufferDecl& decl : buffers) {
    std::vector<int64_t> shape;
    for (const std::string& d : decl.dims) {
      auto it = dims.find(d);
      shape.push_back(it == dims.end() ? 7 : it->second);
    }
    auto t = std::make_unique<HostTensor>(HostTensor::make(dtype_of(decl.elem), shape, decl.name));
    int64_t n = t->storage_elems();
    if (decl.elem == ElemType::I32 && shape.size() == 2) {
      int64_t inner = shape[1];
      for (int64_t r = 0; r < shape[0]; ++r) {
        int id = 0;
        for (int64_t c = 0; c < inner; ++c) {
          if (c > 0 && rng() % 23 == 0) ++id;  // documents of ~23 positions
          t->set(r * inner + c, id);
        }
      }
    } else if (decl.elem == ElemType::I32) {
      for (int64_t i = 0; i < n; ++i) t->set(i, static_cast<double>(rng() % (largest + 1)));
    } else {
      std::uniform_real_distribution<double> u(-1, 1);
      for (int64_t i = 0; i < n; ++i) t->set(i, u(rng));
    }
    out.bindings.buffer(decl.name, t->view);
    out.buffers.push_back(std::move(t));
  }
  static const std::map<std::string, double> defaults = {
      {"window", 37}, {"chunk", 50}, {"img_start", 20}, {"img_end", 90}, {"cap", 5.0}};
  for (const ParamDecl& decl : params) {
    auto it = defaults.find(decl.name);
    if (decl.type == Type::I32) {
      int32_t v = it != defaults.end() ? static_cast<int32_t>(it->second)
                                       : static_cast<int32_t>(rng() % 40) - 5;
      out.bindings.param(decl.name, v);
    } else {
      std::uniform_real_distribution<double> u(-2, 2);
      out.bindings.param(decl.name, static_cast<float>(it != defaults.end() ? it->second : u(rng)));
    }
  }
  return out;
}

EvalContext eval_context(const Bindings& bind, FloatPrecision precision) {
  EvalContext ctx;
  ctx.precision = precision;
  for (const auto& [name, view] : bind.buffers()) {
    BufferView b;
    b.data = view.data;
    b.elem = view.dtype == DType::I32 ? ElemType::I32
             : view.dtype == DType::F32 ? ElemType::F32
             : view.dtype == DType::BF16 ? ElemType::BF16 : ElemType::F16;
    b.sizes = view.shape;
    b.strides = view.strides;
    ctx.buffers.emplace(name, b);
  }
  for (const auto& [name, value] : bind.params()) {
    if (const float* f = std::get_if<float>(&value)) ctx.params.emplace(name, double{*f});
    else ctx.params.emplace(name, int64_t{std::get<int32_t>(value)});
  }
  return ctx;
}

BlockMask brute_force_block_mask(const AttentionProgram& p, const EvalContext& ctx, int batch,
                                 int heads, int seq_q, int seq_kv, int block_q, int block_kv) {
  CompiledEval mask(p.mask, ctx);
  BlockMaskShape shape{batch, heads, seq_q, seq_kv, block_q, block_kv};
  return BlockMask::from_classifier(shape, [&](int b, int h, int qt, int kt) {
    bool any = false, all = true;
    for (int q = qt * block_q; q < std::min(seq_q, (qt + 1) * block_q); ++q)
      for (int kv = kt * block_kv; kv < std::min(seq_kv, (kt + 1) * block_kv); ++kv) {
        bool keep = mask.eval_mask(b, h, q, kv);
        any |= keep;
        all &= keep;
      }
    return !any ? TileClass::Empty : all ? TileClass::Full : TileClass::Partial;
  });
}

AttentionRefHooks ReferenceHooks::hooks() const {
  AttentionRefHooks h;
  auto m = mask, s = score, g = grad;
  h.mask = [m](int b, int hh, int q, int kv) { return m->eval_mask(b, hh, q, kv); };
  h.score = [s](double x, int b, int hh, int q, int kv) { return s->eval_score(x, b, hh, q, kv); };
  h.score_grad = [g](double x, int b, int hh, int q, int kv) { return g->eval_score(x, b, hh, q, kv); };
  return h;
}

ReferenceHooks reference_hooks(const LoweredAttention& p, const EvalContext& ctx) {
  return {std::make_shared<CompiledEval>(p.program.mask, ctx),
          std::make_shared<CompiledEval>(p.program.score, ctx),
          std::make_shared<CompiledEval>(p.score_grad, ctx)};
}

double scaled_error(const std::vector<double>& got, const std::vector<double>& want, double atol,
                    double rtol) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i]) && got[i] == want[i]) continue;
    double e = std::fabs(got[i] - want[i]) / (atol + rtol * std::fabs(want[i]));
    if (std::isnan(e)) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, e);
  }
  return worst;
}

}  // namespace tilejit::testing
