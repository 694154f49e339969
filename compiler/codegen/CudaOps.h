// How each IR node is spelled in generated CUDA: one table (CudaOps.cpp), so the i32/f32
// semantics of IR.h live in one place together with the helpers of kernels_templates/common.cuh.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "compiler/IR.h"

namespace tilejit::cuda {

std::string_view type_spelling(Type t);  // "bool", "int", "float"

// A constant as a CUDA operand ("3", "(-2147483647 - 1)", "0.5f", "__int_as_float(0x7f800000)").
std::string constant(const Expr& e);

// The expression computing `e` from its already-spelled operands (`args`, one per operand, in
// order; for Load the indices). `field` is the TjArgs member of a Param or Load.
std::string render(const Expr& e, const std::vector<std::string>& args, std::string_view field);

}  // namespace tilejit::cuda
