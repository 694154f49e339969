// The checks of the fused linear cross-entropy API (runtime/LinearCe.h): shapes, dtypes,
// strides, alignment and bindings, each a UserError naming the tensor. Nothing here needs a GPU
// except check_resident.
#pragma once

#include <string_view>
#include <vector>

#include "runtime/Bindings.h"
#include "runtime/Driver.h"
#include "runtime/LinearCe.h"

namespace tilejit {

// A 16-bit operand matrix [rows, dim] read with 16-byte copies.
void check_operand(const TensorView& t, DType dtype, int64_t rows, int64_t dim,
                   std::string_view rows_name);
// An fp32 vector [n] (contiguous), or a one-element scalar when n < 0.
void check_f32_vector(const TensorView& t, int64_t n);
// An fp32 gradient matrix [rows, dim] written with 8-byte stores.
void check_f32_matrix(const TensorView& t, int64_t rows, int64_t dim, std::string_view rows_name);
// A weight gradient [rows, dim]: fp32 (as check_f32_matrix) or `elem`, E's 16-bit type, written
// with 4-byte stores.
void check_weight_grad(const TensorView& t, DType elem, int64_t rows, int64_t dim,
                       std::string_view rows_name);
// A tensor the caller says is on the device must be memory the driver knows.
void check_resident(Driver* driver, const TensorView& t);
// The bindings of captured buffers and params only (segment tensors removed).
Bindings captured_only(const LossProgram& prog, const Bindings& bind);
void check_options(const LossProgram& prog, const LinearCeOptions& o);
// A teacher given to a program without a `kl` term, or none given to one with it.
void check_teacher(const LossProgram& prog, const LinearCeTeacher& teacher);
// The teacher's weights and biases (KL programs): its own layout's from `bind`, [V_s, D_t] in E's
// dtype, or the student's (then D_t must be D); checks the teacher's hidden states [N, D_t].
std::vector<SegmentBinding> bind_teacher(const LossProgram& prog, const TensorView& hidden,
                                         const TensorView& teacher_hidden, const Bindings& bind,
                                         const std::vector<SegmentBinding>& student);
// Shape, dtype, layout and bindings checks of a forward call.
void check_forward_inputs(const LossProgram& prog, const TensorView& hidden,
                          const TensorView& targets, const LinearCeOutputs& outputs);

}  // namespace tilejit
