// C tensor descriptors (tj_tensor) as the runtime's TensorViews, and where a call runs.
//
// The conversion checks only what TensorView cannot express (a NULL descriptor, an unknown
// dtype code, ndim out of range, a NULL shape, a device ordinal below -1); shapes, strides,
// ranks and dtypes are then checked by the runtime, whose messages name the tensor.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "runtime/TensorView.h"
#include "tilejit.h"

namespace tilejit::capi {

// `t` as a view named `name`; TJ_ERR_INVALID_ARGUMENT for a malformed descriptor.
TensorView to_view(const tj_tensor* t, std::string name);

// A required descriptor: TJ_ERR_INVALID_ARGUMENT naming `name` when it is NULL.
const tj_tensor& required(const tj_tensor* t, const char* name);

// Prepares a call whose placement follows `primary` (q, hidden): nothing for host memory; for
// device memory, checks that every other device tensor is on the same device, that a GPU is
// usable (TJ_ERR_NO_DEVICE otherwise) and makes that device's primary context current when
// the thread has none. Tensors may be NULL (skipped).
using NamedTensor = std::pair<std::string, const tj_tensor*>;
void prepare_placement(const NamedTensor& primary, const std::vector<NamedTensor>& others = {});
// The same when the placement is already known (TJ_HOST or an ordinal): a backward follows its
// forward. `what` names the reason in messages ("the forward's hidden states").
void prepare_placement(int device, const std::string& what, const std::vector<NamedTensor>& others);
// A GPU is usable and `ordinal` exists; its primary context is made current when the thread has
// no current context.
void prepare_device(int ordinal, const std::string& what);

}  // namespace tilejit::capi
