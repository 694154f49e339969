#include "tests/mask/MaskPrograms.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "dsl/Expr.h"

namespace tilejit::testing {

namespace {

uint64_t draw(std::mt19937_64& rng, uint64_t n) { return rng() % n; }
int64_t draw_range(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(draw(rng, static_cast<uint64_t>(hi - lo + 1)));
}

class MaskGenerator {
 public:
  explicit MaskGenerator(std::mt19937_64& rng) : rng_(rng) {}

  Expr mask(int depth) {
    if (depth <= 0 || draw(rng_, 4) == 0) return atom();
    switch (draw(rng_, 6)) {
      case 0:
      case 1: return mask(depth - 1) && mask(depth - 1);
      case 2:
      case 3: return mask(depth - 1) || mask(depth - 1);
      case 4: return !mask(depth - 1);
      default: return select(mask(depth - 1), mask(depth - 1), mask(depth - 1));
    }
  }

 private:
  Expr param_w() { return ir::make_param("w", Type::I32); }
  Expr param_c() { return ir::make_param("c", Type::I32); }

  Expr small_const() { return lit(static_cast<int>(draw_range(rng_, -20, 40))); }

  // c_q q + c_kv kv + const (+ w), the shapes windows and offsets take.
  Expr affine() {
    static const int coefs[] = {0, 1, 1, 1, -1, 2, -2, 3};
    Expr e = lit(0);
    int cq = coefs[draw(rng_, 8)], ck = coefs[draw(rng_, 8)];
    if (cq != 0) e = cq == 1 ? Expr(dsl::q) : dsl::q * cq;
    if (ck != 0) e = e + (ck == 1 ? Expr(dsl::kv) : dsl::kv * ck);
    if (draw(rng_, 2)) e = e + small_const();
    if (draw(rng_, 4) == 0) e = e + param_w();
    if (draw(rng_, 6) == 0) e = e + dsl::b * static_cast<int>(draw_range(rng_, 1, 3));
    if (draw(rng_, 6) == 0) e = e - dsl::h;
    return e;
  }

  Expr index_expr(const Expr& v) {
    switch (draw(rng_, 6)) {
      case 0: return v + static_cast<int>(draw_range(rng_, -2, 2));
      case 1: return v / static_cast<int>(draw_range(rng_, 1, 3));
      case 2: return max(v - param_w(), 0);
      default: return v;
    }
  }

  Expr doc(const Expr& pos) {
    return ir::make_load("doc", Type::I32,
                         {draw(rng_, 8) == 0 ? Expr(dsl::h) : Expr(dsl::b), index_expr(pos)});
  }

  Expr compare(const Expr& a, const Expr& b) {
    static const Op ops[] = {Op::Eq, Op::Ne, Op::Lt, Op::Le, Op::Gt, Op::Ge};
    return apply(ops[draw(rng_, 6)], {a, b});
  }

  Expr atom() {
    switch (draw(rng_, 12)) {
      case 0:
      case 1: return compare(affine(), affine());
      case 2: return compare(affine(), lit(0));
      case 3: {  // chunks: a / C == c / C, sometimes a param C, sometimes %
        Expr C = draw(rng_, 3) == 0 ? param_c() : lit(static_cast<int>(draw_range(rng_, 1, 40)));
        if (draw(rng_, 4) == 0) return compare(affine() % C, small_const());
        return affine() / C == affine() / C;
      }
      case 4: return abs(dsl::q - dsl::kv) <= param_w();
      case 5: return doc(dsl::q) == doc(dsl::kv);
      case 6: return compare(doc(draw(rng_, 2) ? Expr(dsl::q) : Expr(dsl::kv)), small_const());
      case 7: return dsl::kv < ir::make_load("prefix", Type::I32, {dsl::b}) || dsl::q >= dsl::kv;
      case 8: {
        Expr bias = ir::make_load("score_bias", Type::F32, {dsl::h, index_expr(dsl::kv)});
        Expr t = ir::make_param("t", Type::F32);
        switch (draw(rng_, 3)) {
          case 0: return compare(bias, t);
          case 1: return compare(bias * f32(dsl::q - dsl::kv), t);
          default: return compare(tanh(bias) + log(f32(dsl::kv)), t);
        }
      }
      case 9: return compare(min(affine(), affine()), max(affine(), small_const()));
      case 10: return compare(select(compare(affine(), affine()), affine(), affine()), affine());
      default: return lit(draw(rng_, 2) == 0);
    }
  }

  std::mt19937_64& rng_;
};

}  // namespace

AttentionProgram random_mask_program(std::mt19937_64& rng, int depth) {
  AttentionProgram p;
  p.name = "random_mask";
  p.buffers = {{"doc", ElemType::I32, {"B", "S"}},
               {"score_bias", ElemType::F32, {"H", "S"}},
               {"prefix", ElemType::I32, {"B"}}};
  p.params = {{"w", Type::I32}, {"c", Type::I32}, {"t", Type::F32}};
  p.mask = MaskGenerator(rng).mask(depth);
  return p;
}

MaskBindings random_mask_bindings(std::mt19937_64& rng, const AttentionProgram& prog, int batch,
                                  int heads, int seq) {
  MaskBindings out;
  auto dim = [&](const std::string& d) -> int64_t {
    return d == "B" ? batch : d == "H" ? heads : seq;
  };
  for (const BufferDecl& b : prog.buffers) {
    BufferView view;
    view.elem = b.elem;
    int64_t count = 1;
    for (const std::string& d : b.dims) view.sizes.push_back(dim(d)), count *= dim(d);
    std::vector<unsigned char> bytes(static_cast<size_t>(count) * elem_size(b.elem));
    int64_t row = view.sizes.empty() ? 1 : view.sizes.back();
    bool sorted = draw(rng, 3) != 0;
    int32_t id = 0;
    for (int64_t i = 0; i < count; ++i) {
      unsigned char* at = bytes.data() + i * elem_size(b.elem);
      if (b.elem == ElemType::I32) {
        int32_t v;
        if (b.dims.size() == 1)
          v = static_cast<int32_t>(draw_range(rng, 0, seq));  // a length
        else if (sorted) {
          if (i % row == 0)
            id = static_cast<int32_t>(draw_range(rng, -1, 2));
          else if (draw(rng, 12) == 0)
            id += static_cast<int32_t>(draw_range(rng, 1, 3));
          v = id;
        } else {
          v = static_cast<int32_t>(draw_range(rng, -2, 4));
        }
        std::memcpy(at, &v, 4);
      } else {
        float v = static_cast<float>(draw_range(rng, -400, 400)) / 100.0f;
        if (draw(rng, 200) == 0) v = std::numeric_limits<float>::quiet_NaN();
        std::memcpy(at, &v, 4);
      }
    }
    view.data = bytes.data();
    out.ctx.buffers[b.name] = view;
    out.storage.push_back(std::move(bytes));
  }
  for (const ParamDecl& p : prog.params) {
    if (p.type == Type::I32) {
      int64_t v = draw(rng, 10) == 0 ? draw_range(rng, -5, 0) : draw_range(rng, 1, seq / 2 + 2);
      out.ctx.params[p.name] = v;
    } else {
      out.ctx.params[p.name] = static_cast<double>(draw_range(rng, -300, 300)) / 100.0;
    }
  }
  return out;
}

}  // namespace tilejit::testing
