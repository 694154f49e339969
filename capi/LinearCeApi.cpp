// The C ABI's fused linear cross-entropy: forward into an opaque saved state, backward from it
// (capi/LinearCeCall.h picks the GPU path or the CPU executor by where the tensors live).
#include <cuda.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ErrorBoundary.h"
#include "Handles.h"
#include "TensorDesc.h"
#include "runtime/Driver.h"
#include "runtime/WorkspacePool.h"

using namespace tilejit;
using namespace tilejit::capi;

namespace {

CUstream cu_stream(void* stream) { return static_cast<CUstream>(stream); }

LinearCeOptions options_of(const tj_linear_ce_options* o) {
  LinearCeOptions options;
  if (!o) return options;
  options.filter_threshold = o->filter_threshold;
  options.deterministic = o->deterministic != 0;
  if (o->grad_buffer_bytes != 0) options.grad_buffer_bytes = o->grad_buffer_bytes;
  switch (o->vocab_ordering) {
    case TJ_VOCAB_NATURAL: options.vocab_ordering = VocabOrdering::Natural; break;
    case TJ_VOCAB_AVERAGE_LOGIT: options.vocab_ordering = VocabOrdering::AverageLogit; break;
    case TJ_VOCAB_STATE: options.vocab_ordering = VocabOrdering::State; break;
    default:
      fail(TJ_ERR_INVALID_ARGUMENT,
           "options->vocab_ordering is {}: TJ_VOCAB_NATURAL, _AVERAGE_LOGIT or _STATE",
           o->vocab_ordering);
  }
  if ((o->vocab_ordering == TJ_VOCAB_STATE) != (o->vocab_order != nullptr))
    fail(TJ_ERR_INVALID_ARGUMENT, "options->vocab_order is {} but options->vocab_ordering is {}",
         o->vocab_order ? "given" : "NULL",
         o->vocab_ordering == TJ_VOCAB_STATE ? "TJ_VOCAB_STATE" : "not TJ_VOCAB_STATE");
  if (o->vocab_order) options.vocab_order = o->vocab_order->order;
  return options;
}

// The bindings plus the segments' tensors given explicitly (inputs->segments), under the names
// the program gives them; a name given both ways is an error. `placed` collects the explicit
// tensors for the placement check.
Bindings with_segments(const LossProgram& prog, const Bindings& bind, const tj_linear_ce_inputs& in,
                       std::vector<NamedTensor>& placed) {
  if (!in.segments) {
    if (in.num_segments != 0)
      fail(TJ_ERR_INVALID_ARGUMENT, "inputs->num_segments is {} but inputs->segments is NULL",
           in.num_segments);
    return bind;
  }
  if (in.num_segments != static_cast<int32_t>(prog.segments.size()))
    fail(TJ_ERR_INVALID_ARGUMENT, "program '{}' has {} segment(s) but inputs->num_segments is {}",
         prog.name, prog.segments.size(), in.num_segments);
  Bindings out = bind;
  auto add = [&](const std::string& name, const tj_tensor* t, size_t i, const char* field) {
    if (bind.find_buffer(name) || bind.find_param(name))
      fail(TJ_ERR_INVALID_ARGUMENT,
           "'{}' is given both in the bindings and as inputs->segments[{}].{}", name, i, field);
    out.buffer(name, to_view(t, name));
    placed.emplace_back(name, t);
  };
  for (size_t i = 0; i < prog.segments.size(); ++i) {
    const Segment& s = prog.segments[i];
    const tj_segment_tensors& t = in.segments[i];
    if (!t.weight)
      fail(TJ_ERR_INVALID_ARGUMENT, "inputs->segments[{}].weight ('{}' of segment '{}') is NULL", i,
           s.weight, s.name);
    add(s.weight, t.weight, i, "weight");
    if (t.bias && s.bias.empty())
      fail(TJ_ERR_INVALID_ARGUMENT,
           "inputs->segments[{}].bias is given but segment '{}' has no bias", i, s.name);
    if (t.bias) add(s.bias, t.bias, i, "bias");
  }
  return out;
}

std::optional<TensorView> optional_view(const tj_tensor* t, const char* name) {
  if (!t) return std::nullopt;
  return to_view(t, name);
}

}  // namespace

extern "C" {

void tj_linear_ce_options_init(tj_linear_ce_options* options) {
  if (!options) return;
  const LinearCeOptions defaults;
  options->filter_threshold = defaults.filter_threshold;
  options->deterministic = defaults.deterministic ? 1 : 0;
  options->grad_buffer_bytes = defaults.grad_buffer_bytes;
  options->vocab_ordering = TJ_VOCAB_NATURAL;
  options->vocab_order = nullptr;
}

tj_status tj_linear_ce_forward(const tj_program* program, const tj_linear_ce_inputs* inputs,
                               const tj_bindings* bindings, const tj_linear_ce_options* options,
                               const tj_linear_ce_outputs* outputs, void* stream,
                               tj_linear_ce_state** state) {
  if (state) *state = nullptr;
  return boundary("tj_linear_ce_forward", program_name(program), [&] {
    tj_linear_ce_state*& result = out_param(state, "state");
    const LossProgram& prog = loss_program(program);
    if (!inputs) fail(TJ_ERR_INVALID_ARGUMENT, "the inputs are NULL");
    LinearCeInputViews in{to_view(inputs->hidden, "hidden"), to_view(inputs->targets, "targets"),
                          std::nullopt};
    if (inputs->teacher_hidden)
      in.teacher_hidden = to_view(inputs->teacher_hidden, "teacher_hidden");
    std::vector<NamedTensor> placed{{"targets", inputs->targets},
                                    {"teacher_hidden", inputs->teacher_hidden}};
    Bindings bind = with_segments(prog, bindings_of(bindings), *inputs, placed);
    LinearCeOutputs outs;
    std::vector<bool> d_weight_given(prog.segments.size(), false);
    if (outputs) {
      outs.loss = optional_view(outputs->loss, "loss");
      outs.row_loss = optional_view(outputs->row_loss, "row_loss");
      outs.lse = optional_view(outputs->lse, "lse");
      placed.insert(
          placed.end(),
          {{"loss", outputs->loss}, {"row_loss", outputs->row_loss}, {"lse", outputs->lse}});
      if (!outputs->d_weight && outputs->num_d_weight != 0)
        fail(TJ_ERR_INVALID_ARGUMENT, "outputs->num_d_weight is {} but outputs->d_weight is NULL",
             outputs->num_d_weight);
      if (outputs->d_weight) {
        if (outputs->num_d_weight != static_cast<int32_t>(prog.segments.size()))
          fail(TJ_ERR_INVALID_ARGUMENT,
               "program '{}' has {} segment(s) but outputs->num_d_weight is {}", prog.name,
               prog.segments.size(), outputs->num_d_weight);
        for (size_t i = 0; i < prog.segments.size(); ++i) {
          const std::string name = "d_" + prog.segments[i].weight;
          outs.d_weight.push_back(optional_view(outputs->d_weight[i], name.c_str()));
          if (outputs->d_weight[i]) placed.emplace_back(name, outputs->d_weight[i]);
          d_weight_given[i] = outputs->d_weight[i] != nullptr;
        }
      }
    }
    retag_user_errors(TJ_ERR_UNSUPPORTED, [&] { check_linear_ce_supported(prog, in); });
    prepare_placement({"hidden", inputs->hidden}, placed);

    auto handle = std::make_unique<tj_linear_ce_state>();
    handle->program_name = prog.name;
    handle->segments = prog.segments;
    handle->d_weight_given = d_weight_given;
    handle->device = inputs->hidden->device;
    handle->run = linear_ce_forward(prog, in, bind, options_of(options), cu_stream(stream), outs);
    result = handle.release();
  });
}

tj_status tj_linear_ce_backward(tj_linear_ce_state* state, const tj_tensor* grad_loss,
                                const tj_tensor* d_hidden, const tj_segment_gradients* segments,
                                int32_t num_segments, void* stream) {
  const std::string_view program = state ? std::string_view(state->program_name) : "";
  return boundary("tj_linear_ce_backward", program, [&] {
    if (!state || !state->run) fail(TJ_ERR_INVALID_ARGUMENT, "the loss state is NULL");
    const std::vector<Segment>& segs = state->segments;
    if (num_segments != static_cast<int32_t>(segs.size()))
      fail(TJ_ERR_INVALID_ARGUMENT, "program '{}' has {} segment(s) but num_segments is {}",
           state->program_name, segs.size(), num_segments);
    if (!segments && !segs.empty()) fail(TJ_ERR_INVALID_ARGUMENT, "the segment gradients are NULL");
    LinearCeGradOutputs outs;
    outs.d_hidden = to_view(d_hidden, "d_hidden");
    std::vector<NamedTensor> placed{{"grad_loss", grad_loss}, {"d_hidden", d_hidden}};
    for (size_t i = 0; i < segs.size(); ++i) {
      const Segment& s = segs[i];
      const tj_segment_gradients& g = segments[i];
      if (!g.d_weight && !state->d_weight_given[i])
        fail(TJ_ERR_INVALID_ARGUMENT,
             "segments[{}].d_weight (the gradient of weight '{}' of segment '{}') is NULL and the "
             "forward was not given it",
             i, s.weight, s.name);
      outs.d_weight.push_back(optional_view(g.d_weight, ("d_" + s.weight).c_str()));
      if (g.d_weight) placed.emplace_back("d_" + s.weight, g.d_weight);
      if (s.bias.empty() && g.d_bias)
        fail(TJ_ERR_INVALID_ARGUMENT, "segments[{}].d_bias is given but segment '{}' has no bias",
             i, s.name);
      if (!s.bias.empty() && !g.d_bias)
        fail(TJ_ERR_INVALID_ARGUMENT,
             "segments[{}].d_bias (the gradient of bias '{}' of segment '{}') is NULL", i, s.bias,
             s.name);
      outs.d_bias.push_back(s.bias.empty() ? std::nullopt
                                           : optional_view(g.d_bias, ("d_" + s.bias).c_str()));
      if (g.d_bias) placed.emplace_back("d_" + s.bias, g.d_bias);
    }
    TensorView grad = to_view(grad_loss, "grad_loss");
    prepare_placement(state->device, "the forward's 'hidden'", placed);
    state->run->backward(grad, outs, cu_stream(stream));
  });
}

tj_status tj_linear_ce_state_rows(const tj_linear_ce_state* state, int64_t* rows,
                                  int64_t* kept_rows) {
  return boundary("tj_linear_ce_state_rows", [&] {
    if (!state || !state->run) fail(TJ_ERR_INVALID_ARGUMENT, "the loss state is NULL");
    if (rows) *rows = state->run->rows();
    if (kept_rows) *kept_rows = state->run->kept_rows();
  });
}

void tj_linear_ce_state_destroy(tj_linear_ce_state* state) { delete state; }

tj_status tj_vocab_order_create(int32_t refresh_every, tj_vocab_order** order) {
  if (order) *order = nullptr;
  return boundary("tj_vocab_order_create", [&] {
    tj_vocab_order*& result = out_param(order, "order");
    if (refresh_every < 1)
      fail(TJ_ERR_INVALID_ARGUMENT, "refresh_every is {}: at least 1", refresh_every);
    result = new tj_vocab_order{VocabOrder::by_average_logit(refresh_every)};
  });
}

tj_status tj_vocab_order_create_fixed(const int32_t* const* rows_in_order, const int64_t* sizes,
                                      int32_t num_segments, tj_vocab_order** order) {
  if (order) *order = nullptr;
  return boundary("tj_vocab_order_create_fixed", [&] {
    tj_vocab_order*& result = out_param(order, "order");
    if (num_segments < 1 || !rows_in_order || !sizes)
      fail(TJ_ERR_INVALID_ARGUMENT,
           "num_segments is {} and rows_in_order / sizes are {} / {}: at least one segment",
           num_segments, rows_in_order ? "given" : "NULL", sizes ? "given" : "NULL");
    std::vector<std::vector<int32_t>> rows(static_cast<size_t>(num_segments));
    for (int32_t s = 0; s < num_segments; ++s) {
      if (sizes[s] < 1 || !rows_in_order[s])
        fail(TJ_ERR_INVALID_ARGUMENT, "segment {}: sizes[{}] is {} and rows_in_order[{}] is {}", s,
             s, sizes[s], s, rows_in_order[s] ? "given" : "NULL");
      rows[s].assign(rows_in_order[s], rows_in_order[s] + sizes[s]);
    }
    result = new tj_vocab_order{VocabOrder::fixed(std::move(rows))};
  });
}

void tj_vocab_order_destroy(tj_vocab_order* order) { delete order; }

tj_status tj_vocab_order_stats(const tj_vocab_order* order, int64_t* forwards,
                               int64_t* ordered_forwards, int64_t* rebuilds,
                               double* last_survival) {
  return boundary("tj_vocab_order_stats", [&] {
    if (!order || !order->order) fail(TJ_ERR_INVALID_ARGUMENT, "the vocabulary order is NULL");
    const VocabOrder::Stats s = order->order->stats();
    if (forwards) *forwards = s.forwards;
    if (ordered_forwards) *ordered_forwards = s.ordered_forwards;
    if (rebuilds) *rebuilds = s.rebuilds;
    if (last_survival) *last_survival = s.last_survival;
  });
}

// The pool of the device the library's calls use on this thread (Driver::ensure_context); no GPU:
// nothing held, nothing to hand back.
tj_status tj_workspace_pool_held(uint64_t* bytes) {
  return boundary("tj_workspace_pool_held", [&] {
    uint64_t& out = out_param(bytes, "bytes");
    out = 0;
    if (!gpu_available()) return;
    Driver::get()->ensure_context();
    out = workspace_pool_held_bytes();
  });
}

tj_status tj_workspace_pool_trim(void) {
  return boundary("tj_workspace_pool_trim", [&] {
    if (!gpu_available()) return;
    Driver::get()->ensure_context();
    trim_workspace_pool();
  });
}

}  // extern "C"
