#include "runtime/LinearCeChecks.h"

#include <cmath>
#include <limits>

#include "compiler/Error.h"
#include "compiler/Validate.h"

namespace tilejit {

// A 16-bit operand matrix [rows, dim] read with 16-byte copies.
void check_operand(const TensorView& t, DType dtype, int64_t rows, int64_t dim,
                   std::string_view rows_name) {
  t.check_well_formed().check_rank(2).check_dtype(dtype).check_where(TensorView::Where::Device);
  t.check_dim(0, rows, rows_name).check_dim(1, dim, "D").check_last_dim_contiguous();
  TILEJIT_USER_CHECK(t.strides[0] % 8 == 0 && t.strides[0] >= dim,
                     "'{}': the row stride must be a multiple of 8 elements and at least D "
                     "(16-byte rows), got {} ({})",
                     t.name, t.strides[0], t.describe());
  t.check_alignment(16);
}

// An fp32 output or input vector [n] (contiguous), or a one-element scalar when n < 0.
void check_f32_vector(const TensorView& t, int64_t n) {
  t.check_well_formed().check_dtype(DType::F32).check_where(TensorView::Where::Device);
  if (n < 0) {
    TILEJIT_USER_CHECK(t.numel() == 1, "'{}' must hold one element, got {}", t.name, t.describe());
    return;
  }
  t.check_rank(1).check_dim(0, n, "N");
  TILEJIT_USER_CHECK(n <= 1 || t.strides[0] == 1, "'{}' must be contiguous ({})", t.name,
                     t.describe());
  t.check_alignment(4);
}

// An fp32 gradient matrix [rows, dim] written with 8-byte stores.
void check_f32_matrix(const TensorView& t, int64_t rows, int64_t dim, std::string_view rows_name) {
  t.check_well_formed()
      .check_rank(2)
      .check_dtype(DType::F32)
      .check_where(TensorView::Where::Device);
  t.check_dim(0, rows, rows_name).check_dim(1, dim, "D").check_last_dim_contiguous();
  TILEJIT_USER_CHECK(t.strides[0] % 2 == 0 && t.strides[0] >= dim,
                     "'{}': the row stride must be even and at least D, got {} ({})", t.name,
                     t.strides[0], t.describe());
  t.check_alignment(8);
}

void check_weight_grad(const TensorView& t, DType elem, int64_t rows, int64_t dim,
                       std::string_view rows_name) {
  t.check_well_formed();
  if (t.dtype == DType::F32) return check_f32_matrix(t, rows, dim, rows_name);
  TILEJIT_USER_CHECK(t.dtype == elem,
                     "'{}': a weight gradient is f32 or E's dtype ({}), got {} ({})", t.name,
                     dtype_name(elem), dtype_name(t.dtype), t.describe());
  t.check_rank(2).check_where(TensorView::Where::Device);
  t.check_dim(0, rows, rows_name).check_dim(1, dim, "D").check_last_dim_contiguous();
  TILEJIT_USER_CHECK(t.strides[0] % 2 == 0 && t.strides[0] >= dim,
                     "'{}': the row stride must be even and at least D, got {} ({})", t.name,
                     t.strides[0], t.describe());
  t.check_alignment(4);
}

// A tensor the caller says is on the device must be memory the driver knows.
void check_resident(Driver* driver, const TensorView& t) {
  TILEJIT_USER_CHECK(t.numel() == 0 || driver->is_device_pointer(t.data),
                     "'{}' is not device memory ({})", t.name, t.describe());
}

Bindings captured_only(const LossProgram& prog, const Bindings& bind) {
  auto is_segment_name = [&](const std::string& n) {
    for (const Segment& s : prog.segments)
      if (n == s.weight || n == s.bias) return true;
    if (prog.kl)
      for (const Segment& s : prog.kl->teacher_segments)
        if (n == s.weight || n == s.bias) return true;
    return false;
  };
  Bindings out;
  for (const auto& [name, view] : bind.buffers())
    if (!is_segment_name(name)) out.set({name, view});
  for (const auto& [name, value] : bind.params()) {
    if (is_segment_name(name)) continue;
    if (auto* f = std::get_if<float>(&value))
      out.set({name, *f});
    else
      out.set({name, std::get<int32_t>(value)});
  }
  return out;
}

void check_options(const LossProgram& prog, const LinearCeOptions& o) {
  TILEJIT_USER_CHECK(std::isfinite(o.filter_threshold) && o.filter_threshold < 1,
                     "program {}: filter_threshold must be finite and < 1, got {}", prog.name,
                     o.filter_threshold);
  TILEJIT_USER_CHECK(o.grad_buffer_bytes >= 0,
                     "program {}: grad_buffer_bytes must be positive (or 0: the library's), "
                     "got {}",
                     prog.name, o.grad_buffer_bytes);
  const bool state = o.vocab_ordering == VocabOrdering::State;
  TILEJIT_USER_CHECK(!state || o.vocab_order,
                     "program {}: vocab_ordering State needs a vocab_order (runtime/VocabOrder.h)",
                     prog.name);
  TILEJIT_USER_CHECK(state || !o.vocab_order,
                     "program {}: a vocab_order is given but vocab_ordering is not State",
                     prog.name);
}

namespace {

// The weights [V_s, dim] and biases of `segments` (the student's or the teacher's) from `bind`,
// in `dtype`.
std::vector<SegmentBinding> bind_layout(const LossProgram& prog,
                                        const std::vector<Segment>& segments, DType dtype,
                                        int64_t dim, const Bindings& bind) {
  std::vector<SegmentBinding> out;
  for (const Segment& s : segments) {
    for (const std::string* n : {&s.weight, &s.bias}) {
      if (n->empty()) continue;
      TILEJIT_USER_CHECK(!prog.find_buffer(*n) && !prog.find_param(*n),
                         "program {}: '{}' names both a segment tensor and a captured value",
                         prog.name, *n);
      TILEJIT_USER_CHECK(!bind.find_param(*n),
                         "program {}: '{}' of segment '{}' is bound to a "
                         "scalar, not a tensor",
                         prog.name, *n, s.name);
      TILEJIT_USER_CHECK(bind.find_buffer(*n), "program {}: {} '{}' of segment '{}' is not bound",
                         prog.name, n == &s.weight ? "weight" : "bias", *n, s.name);
    }
    SegmentBinding b{*bind.find_buffer(s.weight), std::nullopt};
    b.weight.name = s.weight;
    check_operand(b.weight, dtype, s.size(), dim, "V_" + s.name);
    if (!s.bias.empty()) {
      b.bias = *bind.find_buffer(s.bias);
      b.bias->name = s.bias;
      b.bias->check_well_formed().check_rank(1).check_dtype(dtype);
      b.bias->check_where(TensorView::Where::Device).check_dim(0, s.size(), "V_" + s.name);
      TILEJIT_USER_CHECK(s.size() <= 1 || b.bias->strides[0] == 1, "'{}' must be contiguous ({})",
                         s.bias, b.bias->describe());
    }
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace

std::vector<SegmentBinding> bind_segments(const LossProgram& prog, const TensorView& hidden,
                                          const Bindings& bind) {
  return bind_layout(prog, prog.segments, hidden.dtype, hidden.shape[1], bind);
}

std::vector<SegmentBinding> bind_teacher(const LossProgram& prog, const TensorView& hidden,
                                         const TensorView& teacher_hidden, const Bindings& bind,
                                         const std::vector<SegmentBinding>& student) {
  const int64_t n = hidden.shape[0];
  teacher_hidden.check_well_formed().check_rank(2).check_dtype(hidden.dtype);
  teacher_hidden.check_dim(0, n, "N");
  const int64_t dt = teacher_hidden.shape[1];
  TILEJIT_USER_CHECK(dt > 0 && dt % 8 == 0, "'{}': D_t = {} must be a positive multiple of 8 ({})",
                     teacher_hidden.name, dt, teacher_hidden.describe());
  check_operand(teacher_hidden, hidden.dtype, n, dt, "N");
  if (prog.kl->teacher_segments.empty()) {
    TILEJIT_USER_CHECK(dt == hidden.shape[1],
                       "program {}: without a teacher layout the teacher uses the student's "
                       "weights, so '{}' needs D = {} columns, not {} ({})",
                       prog.name, teacher_hidden.name, hidden.shape[1], dt,
                       teacher_hidden.describe());
    return student;
  }
  return bind_layout(prog, prog.kl->teacher_segments, hidden.dtype, dt, bind);
}

void check_teacher(const LossProgram& prog, const LinearCeTeacher& teacher) {
  TILEJIT_USER_CHECK(prog.kl || !teacher.hidden,
                     "program {}: teacher hidden states '{}' are given but the program has no kl "
                     "term",
                     prog.name, teacher.hidden ? teacher.hidden->name : "");
  TILEJIT_USER_CHECK(!prog.kl || teacher.hidden,
                     "program {}: the kl term needs the teacher's hidden states "
                     "(LinearCeTeacher::hidden, [N, D_t])",
                     prog.name);
}

// Shape, dtype, layout and bindings checks of a forward call; nothing here needs a GPU.
void check_forward_inputs(const LossProgram& prog, const TensorView& hidden,
                          const TensorView& targets, const LinearCeOutputs& outputs) {
  validate(prog);
  check_linear_ce_supported(prog);
  hidden.check_well_formed().check_rank(2).check_dtype({DType::BF16, DType::F16});
  const int64_t n = hidden.shape[0], d = hidden.shape[1];
  TILEJIT_USER_CHECK(d > 0 && d % 8 == 0, "'{}': D = {} must be a positive multiple of 8 ({})",
                     hidden.name, d, hidden.describe());
  TILEJIT_USER_CHECK(n <= std::numeric_limits<int32_t>::max(), "'{}': N = {} exceeds 2^31 - 1",
                     hidden.name, n);
  check_operand(hidden, hidden.dtype, n, d, "N");
  targets.check_well_formed().check_rank(1).check_dtype({DType::I32, DType::I64});
  targets.check_where(TensorView::Where::Device)
      .check_dim(0, n, "N")
      .check_alignment(targets.dtype == DType::I64 ? 8 : 4);
  if (outputs.loss) check_f32_vector(*outputs.loss, -1);
  if (outputs.row_loss) check_f32_vector(*outputs.row_loss, n);
  if (outputs.lse) check_f32_vector(*outputs.lse, n);
}

}  // namespace tilejit
