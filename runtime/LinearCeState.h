// What the fused linear cross-entropy's forward (LinearCe.cpp) and backward
// (LinearCeBackward.cpp) share: a program's compiled kernels (LinearCeKernels.cpp), the launch
// helper, the storage of library-allocated outputs, and the state the forward saves for the
// backward. Private to those files.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/Error.h"
#include "compiler/Lower.h"
#include "compiler/codegen/ArgLayout.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "runtime/Environment.h"
#include "runtime/KernelCache.h"
#include "runtime/Launch.h"
#include "runtime/LinearCe.h"
#include "runtime/LinearCeOrder.h"
#include "runtime/LinearCeParams.h"
#include "runtime/LinearCeWorkspace.h"

namespace tilejit {

namespace linear_ce {

inline unsigned blocks(int64_t n, int64_t per) {
  return static_cast<unsigned>((n + per - 1) / per);
}

// A program's kernels for one element type and arch; modules are compiled on first use, so a
// forward-only caller never compiles the backward.
struct PreparedLoss {
  LoweredLoss lowered;
  ArgLayout layout;
  ElemType elem = ElemType::BF16;
  std::string arch;
  std::mutex mu;
  std::map<LossModule, std::pair<std::map<std::string, std::string, std::less<>>,
                                 std::shared_ptr<const CompiledKernel>>>
      modules;

  // The entry point `kernel` of module `m`, compiled (through the kernel cache) on first use and
  // loaded in the current context, with `dynamic_smem` bytes of dynamic shared memory allowed.
  CUfunction function(LossModule m, std::string_view kernel, int dynamic_smem = 0);

  // Whether the backward's dE / dC products run the warp-specialised Hopper loop (sm_90a modules;
  // its tiles come by TMA, and an ordered segment's weight rows are staged for it).
  bool hopper_products() const {
    return arch == "sm_90a" && linear_ce_tile_loop() == CeTileLoop::Sm90;
  }
};

// The operands' element type (bf16 or f16; a UserError otherwise).
ElemType elem_of(DType dtype);

// `prog`'s kernels for `elem` on `arch`, memoised (runtime/LinearCeKernels.cpp).
std::shared_ptr<PreparedLoss> prepare(const LossProgram& prog, ElemType elem,
                                      const std::string& arch);

// Launches `f` with each argument passed by value (types must match the entry's parameters).
template <class... A>
inline void run(CUfunction f, Dim3 grid, Dim3 block, size_t smem, CUstream stream, A... args) {
  void* params[] = {static_cast<void*>(&args)...};
  launch(f, grid, block, smem, stream, params);
}

inline Driver* require_gpu() {
  Driver* driver = Driver::get();
  TILEJIT_USER_CHECK(driver, "linear cross-entropy: no GPU: {}", Driver::unavailable_reason());
  driver->ensure_context();
  return driver;
}

// Error messages name tensors by their views' names; an unnamed view gets the API's name.
inline TensorView named(const TensorView& t, std::string_view name) {
  TensorView out = t;
  if (out.name.empty()) out.name = name;
  return out;
}

// Owns the library-allocated outputs of a call.
struct Storage {
  std::vector<DeviceBuffer> buffers;
  TensorView take(size_t floats, std::vector<int64_t> shape, std::string name) {
    buffers.emplace_back(std::max<size_t>(floats, 1) * sizeof(float));
    return TensorView::contiguous(buffers.back().data(), DType::F32, std::move(shape),
                                  TensorView::Where::Device, std::move(name));
  }
};

// The side of the square of (row tile, vocabulary tile) pairs that the CTAs running at once (one
// per SM) should take, about sqrt(SMs): as many row tiles as vocabulary tiles, each read by all
// of them together, from L2, rather than one vocabulary tile and a row tile per CTA. The forward's
// grid order (CeFwdParams::row_group) and the gradient tiles' (linear_ce_pair_visit) use it.
// Measured on the KL forward (N 24,576, D 5120, V 248k, H100): 312 ms in row-tile order, 218-225
// ms with groups of 6 to 24 (11 here). TILEJIT_CE_GROUP (1 to 1024, read at every call) sets it
// instead, for measuring.
inline int32_t shared_tiles_group(int num_sms) {
  const int64_t chosen = env_integer("TILEJIT_CE_GROUP", 1, 1024, 0);
  if (chosen > 0) return static_cast<int32_t>(chosen);
  return std::max(1, static_cast<int32_t>(std::lround(std::sqrt(static_cast<double>(num_sms)))));
}

// A KL program's tensor maps on the Hopper loop (kernels_templates/linear_ce_kl_operands.cuh):
// the student's and the teacher's compacted kept rows and each segment's weights, both sides; a
// segment with an order (in `layout`, or the teacher's) is gathered with cp.async and gets no map.
// The hidden rows' boxes are slices of 128 / cluster rows for a forward in clusters of `cluster`
// CTAs (CeFwdParams::split_cluster).
CeKlMaps kl_operand_maps(const CeLayout& layout, const CeRows& rows, const CeTeacher& teacher,
                         bool f16, int cluster = 1);

// CeTeacher::shared_weights for `teacher` beside the student's `layout` of `dim` columns: bit s
// where segment s's teacher weight rows are the student's (same rows, stride, order and dim), so
// that a KL pair's products on the Hopper loop read one weight tile.
int32_t shared_teacher_weights(const CeLayout& layout, const CeTeacher& teacher, int32_t dim);

}  // namespace linear_ce

// What a forward keeps for its backward (LinearCe.h "Saved state").
struct LinearCeState {
  std::shared_ptr<linear_ce::PreparedLoss> kernels;
  std::vector<SegmentBinding> segments;
  std::vector<unsigned char> args;  // packed TjArgs
  DType dtype = DType::BF16;
  int64_t n_rows = 0, dim = 0, n_kept = 0;
  float threshold = 0;
  bool analytic_smoothing = false;
  linear_ce::CeLayout layout;     // with the vocabulary order the forward visited, if any
  linear_ce::ForwardOrder order;  // that order and the state that handed it out (LinearCeOrder.h)
  // KL term: the teacher's weights and the kernels' view of it (the student's tiling and order,
  // the teacher's kept rows once gathered).
  std::vector<SegmentBinding> teacher_segments;
  linear_ce::CeTeacher teacher;
  LinearCeWorkspace ws;
  int64_t grad_buffer_bytes = 0;  // the backward's chunks' budget (LinearCeOptions; 0: default)
  // The weights' gradient buffers the forward was given (LinearCeOutputs::d_weight), per segment:
  // the backward's outputs unless it is given others.
  std::vector<std::optional<TensorView>> d_weight_outputs;
  // Bit s: segment s's weights are in position order in d_weight_outputs[s] (rows of D
  // contiguous, E's 16-bit type), as the forward left them, where a backward may read them. A
  // backward writing dC there clears it (a later backward of the same forward stages them).
  mutable std::atomic<uint32_t> weights_in_grad_buffer{0};
  // In the forward's stream order (DeviceBuffer::on_stream), freed with the state on the forward's
  // stream after the backwards' work on theirs (used_on), hence mutable.
  mutable DeviceBuffer rows;         // narrowed targets [N], kept [N], slot [N], status [2]
  mutable DeviceBuffer forward;      // the workspace's saved part: [0, ws.saved_end)
  mutable std::mutex release_mutex;  // backwards on several threads
  linear_ce::Storage outputs;

  int32_t* targets32() const { return static_cast<int32_t*>(rows.data()); }
  int32_t* kept() const { return targets32() + n_rows; }
  int32_t* slot() const { return targets32() + 2 * n_rows; }
  int32_t* status() const { return targets32() + 3 * n_rows; }
  // The buffers above are freed after the work enqueued on `stream` so far too (a backward's,
  // once all its launches are enqueued). Never throws: a driver failure here is reported, and
  // the buffers are then freed after the forward's stream alone.
  void used_on(CUstream stream) const noexcept {
    try {
      std::lock_guard lock(release_mutex);
      rows.used_on(stream);
      forward.used_on(stream);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tilejit: warning: %s\n", e.what());
    }
  }
  // A slice of the saved part (a slice of another region here is a bug: std::logic_error).
  template <class T>
  T* fwd(const WorkspaceSlice& s) const {
    if (s.bytes && s.offset + s.bytes > ws.saved_end)
      throw std::logic_error("linear CE: a forward scratch slice read from the saved state");
    return static_cast<T*>(slice_address(forward.data(), 0, s));
  }
};

namespace linear_ce {

// linear_ce_classify's parameters for the kept rows of `st` (its saved statistics) under program
// `P`, in `st`'s vocabulary order: every tile visited until the caller sets the tile maxima (and
// where the classes go).
CeClassifyParams classify_params(const LinearCeState& st, const LossProgram& P);

// Whether the backward on the Hopper products reads an ordered segment's weights in position
// order from its gradient buffer: the forward left its copy there (`copy_in_grad_buffer`), and
// dC goes there in 16-bit rows of `dim` (LinearCeBackward.cpp).
inline bool weights_read_by_position(bool copy_in_grad_buffer, bool grad_16, int64_t grad_stride,
                                     int64_t dim) {
  return copy_in_grad_buffer && grad_16 && grad_stride == dim;
}

// The backward's budget for its G buffer (LinearCeOptions::grad_buffer_bytes): `asked` if set,
// else kPositionOrderGradBufferBytes where it stages no weights and reads some in position
// order, else kDefaultGradBufferBytes.
inline int64_t grad_buffer_budget(int64_t asked, bool by_position, bool stage_weights) {
  if (asked > 0) return asked;
  return by_position && !stage_weights ? LinearCeOptions::kPositionOrderGradBufferBytes
                                       : LinearCeOptions::kDefaultGradBufferBytes;
}

}  // namespace linear_ce

}  // namespace tilejit
