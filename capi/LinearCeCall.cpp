#include "LinearCeCall.h"

#include <string>
#include <vector>

#include "compiler/Error.h"
#include "compiler/Lower.h"
#include "runtime/Driver.h"
#include "runtime/LinearCeChecks.h"
#include "runtime/cpu/CpuLinearCe.h"
#include "runtime/cpu/RowHooks.h"

namespace tilejit::capi {

namespace {

using Where = TensorView::Where;

// ---- GPU -----------------------------------------------------------------------------------

class DeviceLinearCe final : public LinearCeRun {
 public:
  explicit DeviceLinearCe(LinearCeForward forward) : forward_(std::move(forward)) {}

  int64_t rows() const override { return forward_.n_rows; }
  int64_t kept_rows() const override { return forward_.n_kept; }

  void backward(const TensorView& grad_loss, const LinearCeGradOutputs& outputs,
                CUstream stream) override {
    LinearCeGradients g = linear_cross_entropy_backward(forward_, grad_loss, stream, outputs);
    // What the previous backward allocated (gradients the caller did not pass) may still be in
    // use by its stream: wait for that stream when it is this call's (the usual case), else for
    // the context (it may be gone by now). (Its scratch was freed in its stream's order.)
    if (allocated_ && allocated_stream_ == stream) Driver::get()->stream_synchronize(stream);
    if (allocated_ && allocated_stream_ != stream) Driver::get()->context_synchronize();
    allocated_ = std::move(g.storage);
    allocated_stream_ = stream;
  }

 private:
  LinearCeForward forward_;
  std::shared_ptr<const void> allocated_;  // the last backward's outputs, freed with the state
  CUstream allocated_stream_ = nullptr;    // where the last backward ran
};

// ---- CPU -----------------------------------------------------------------------------------

// A segment's weight or bias from the bindings, named as the program names it.
TensorView segment_tensor(const LossProgram& prog, const Bindings& bind, const Segment& seg,
                          const std::string& name, const char* role) {
  TILEJIT_USER_CHECK(!bind.find_param(name),
                     "program {}: '{}' of segment '{}' is bound to a scalar, not a tensor",
                     prog.name, name, seg.name);
  const TensorView* t = bind.find_buffer(name);
  TILEJIT_USER_CHECK(t, "program {}: {} '{}' of segment '{}' is not bound", prog.name, role, name,
                     seg.name);
  TensorView v = *t;
  v.name = name;
  return v;
}

// A layout's weights and biases (an empty view for a segment without a bias).
void bind_layout(const LossProgram& prog, const Bindings& bind,
                 const std::vector<Segment>& segments, const char* role,
                 std::vector<TensorView>& weights, std::vector<TensorView>& biases) {
  for (const Segment& s : segments) {
    weights.push_back(segment_tensor(prog, bind, s, s.weight, role));
    biases.push_back(s.bias.empty() ? TensorView{} : segment_tensor(prog, bind, s, s.bias, "bias"));
  }
}

// The bindings of captured buffers and params: every segment tensor (student and teacher)
// removed.
Bindings captures_of(const LossProgram& prog, const Bindings& bind) {
  auto segment_name = [&](const std::string& n) {
    auto in = [&](const std::vector<Segment>& segments) {
      for (const Segment& s : segments)
        if (n == s.weight || n == s.bias) return true;
      return false;
    };
    return in(prog.segments) || (prog.kl && in(prog.kl->teacher_segments));
  };
  Bindings out;
  for (const auto& [name, view] : bind.buffers())
    if (!segment_name(name)) out.buffer(name, view);
  for (const auto& [name, value] : bind.params()) {
    if (segment_name(name)) continue;
    if (const auto* f = std::get_if<float>(&value))
      out.param(name, *f);
    else
      out.param(name, std::get<int32_t>(value));
  }
  return out;
}

void check_one_element(const LossProgram& prog, const TensorView& t) {
  t.check_where(Where::Host).check_dtype(DType::F32);
  TILEJIT_USER_CHECK(t.numel() == 1, "program {}: tensor '{}' must hold one element, got {}",
                     prog.name, t.name, t.describe());
}

void check_rows(const TensorView& t, int64_t rows) {
  t.check_where(Where::Host).check_dtype(DType::F32).check_rank(1).check_dim(0, rows, "N");
}

TensorView rows_view(std::vector<float>& v, const char* name) {
  return TensorView::contiguous(v.data(), DType::F32, {static_cast<int64_t>(v.size())}, Where::Host,
                                name);
}

int64_t target_at(const TensorView& t, int64_t row) {
  const int64_t at = row * t.strides[0];
  if (t.dtype == DType::I64) return static_cast<const int64_t*>(t.data)[at];
  return static_cast<const int32_t*>(t.data)[at];
}

class HostLinearCe final : public LinearCeRun {
 public:
  HostLinearCe(const LossProgram& prog, const LinearCeInputViews& in, const Bindings& bind,
               const LinearCeOptions& options)
      : lowered_(lower(prog)), filter_threshold_(options.filter_threshold) {
    const LossProgram& p = lowered_.program;
    in_.hidden = in.hidden;
    in_.targets = in.targets;
    bind_layout(p, bind, p.segments, "weight", in_.weights, in_.biases);
    if (in.teacher_hidden) in_.teacher_hidden = *in.teacher_hidden;
    if (p.kl)
      bind_layout(p, bind, p.kl->teacher_segments, "teacher weight", in_.teacher_weights,
                  in_.teacher_biases);
    hooks_ = make_row_hooks(lowered_, captures_of(p, bind));
  }

  void forward(const LinearCeOutputs& outputs) {
    const LossProgram& p = lowered_.program;
    in_.hidden.check_rank(2).check_where(Where::Host);
    const int64_t n = in_.hidden.shape[0];
    if (outputs.loss) check_one_element(p, *outputs.loss);
    if (outputs.row_loss) check_rows(*outputs.row_loss, n);
    if (outputs.lse) check_rows(*outputs.lse, n);

    lse_.assign(n, 0.0f);
    std::vector<float> row_loss(n, 0.0f);
    CpuLinearCeForwardOutputs out{rows_view(lse_, "lse"), rows_view(row_loss, "row_loss"), {}};
    if (p.kl) {
      tempered_lse_.assign(n, 0.0f);
      teacher_lse_.assign(n, 0.0f);
      out.tempered_lse = rows_view(tempered_lse_, "tempered_lse");
      out.teacher_lse = rows_view(teacher_lse_, "teacher_lse");
    }
    const double loss = cpu_linear_ce_forward(*hooks_, p, in_, out);

    if (outputs.loss) *static_cast<float*>(outputs.loss->data) = static_cast<float>(loss);
    for (auto [view, values] :
         {std::pair{&outputs.row_loss, &row_loss}, std::pair{&outputs.lse, &lse_}})
      if (*view)
        for (int64_t r = 0; r < n; ++r)
          static_cast<float*>((*view)->data)[r * (*view)->strides[0]] = (*values)[r];
    for (int64_t r = 0; r < n; ++r) kept_ += target_at(in_.targets, r) != p.ignore_index;
    d_weight_ = outputs.d_weight;  // the backward's, unless it is given others
  }

  int64_t rows() const override { return static_cast<int64_t>(lse_.size()); }
  int64_t kept_rows() const override { return kept_; }

  void backward(const TensorView& grad_loss, const LinearCeGradOutputs& outputs,
                CUstream) override {
    const LossProgram& p = lowered_.program;
    CpuLinearCeBackwardArgs a;
    a.lse = rows_view(lse_, "lse");
    if (p.kl) {
      a.tempered_lse = rows_view(tempered_lse_, "tempered_lse");
      a.teacher_lse = rows_view(teacher_lse_, "teacher_lse");
    }
    a.filter_threshold = filter_threshold_;
    if (p.reduction == Reduction::None) {
      check_rows(grad_loss, rows());
      a.grad_rows = grad_loss;
    } else {
      check_one_element(p, grad_loss);
      a.grad_loss = *static_cast<const float*>(grad_loss.data);
    }
    TILEJIT_USER_CHECK(outputs.d_hidden, "program {}: the output 'd_hidden' is required", p.name);
    a.d_hidden = *outputs.d_hidden;
    TILEJIT_USER_CHECK(outputs.d_weight.size() == p.segments.size(),
                       "program {}: {} weight gradients for {} segments", p.name,
                       outputs.d_weight.size(), p.segments.size());
    for (size_t s = 0; s < p.segments.size(); ++s) {
      const Segment& seg = p.segments[s];
      const std::optional<TensorView>& d_weight =
          outputs.d_weight[s] || s >= d_weight_.size() ? outputs.d_weight[s] : d_weight_[s];
      TILEJIT_USER_CHECK(d_weight, "program {}: the gradient of weight '{}' is required", p.name,
                         seg.weight);
      a.d_weights.push_back(*d_weight);
      const bool bias_given = s < outputs.d_bias.size() && outputs.d_bias[s];
      TILEJIT_USER_CHECK(!bias_given || !seg.bias.empty(),
                         "program {}: segment '{}' has no bias, but a d_bias output was given "
                         "for it",
                         p.name, seg.name);
      TILEJIT_USER_CHECK(bias_given || seg.bias.empty(),
                         "program {}: the gradient of bias '{}' of segment '{}' is required",
                         p.name, seg.bias, seg.name);
      a.d_biases.push_back(bias_given ? *outputs.d_bias[s] : TensorView{});
    }
    cpu_linear_ce_backward(*hooks_, p, in_, a);
  }

 private:
  LoweredLoss lowered_;
  float filter_threshold_;
  std::unique_ptr<LossRowHooks> hooks_;
  CpuLinearCeInputs in_;
  std::vector<float> lse_, tempered_lse_, teacher_lse_;  // the forward's, for the backward
  std::vector<std::optional<TensorView>> d_weight_;      // given to the forward (or none)
  int64_t kept_ = 0;
};

}  // namespace

void check_linear_ce_supported(const LossProgram& prog, const LinearCeInputViews& inputs) {
  const TensorView& hidden = inputs.hidden;
  if (hidden.where != Where::Device) return;  // the CPU executor takes every program
  tilejit::check_linear_ce_supported(prog);
  TILEJIT_USER_CHECK(hidden.dtype == DType::BF16 || hidden.dtype == DType::F16,
                     "program {}: the GPU linear cross-entropy kernels take bf16 or f16 operands, "
                     "but tensor '{}' is {}",
                     prog.name, hidden.name, dtype_name(hidden.dtype));
}

std::unique_ptr<LinearCeRun> linear_ce_forward(const LossProgram& prog,
                                               const LinearCeInputViews& inputs,
                                               const Bindings& bindings,
                                               const LinearCeOptions& options, CUstream stream,
                                               const LinearCeOutputs& outputs) {
  TILEJIT_USER_CHECK(!inputs.teacher_hidden || prog.kl,
                     "program {}: tensor '{}' is given but the program has no KL term", prog.name,
                     inputs.teacher_hidden ? inputs.teacher_hidden->name : "");
  if (inputs.hidden.where == Where::Device)
    return std::make_unique<DeviceLinearCe>(
        linear_cross_entropy_forward(prog, inputs.hidden, bindings, inputs.targets, options, stream,
                                     outputs, LinearCeTeacher{inputs.teacher_hidden}));
  check_options(prog, options);  // the GPU's options, checked on the CPU too
  auto run = std::make_unique<HostLinearCe>(prog, inputs, bindings, options);
  run->forward(outputs);
  return run;
}

}  // namespace tilejit::capi
