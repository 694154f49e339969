#include "bench/ce_bench_problem.h"

namespace tilejit::bench {

CeProblem upload_problem(const CeShape& shape, const CeHostData& data) {
  CeProblem p;
  for (size_t s = 0; s < data.weights.size(); ++s) {
    p.weights.push_back(device_tensor(DType::BF16, {shape.segments[s].second, shape.dim},
                                      weight_name(s), data.weights[s].data()));
    p.bind.buffer(weight_name(s), p.weights.back().view);
  }
  if (shape.softcap > 0) p.bind.param("cap", shape.softcap);
  p.hidden = device_tensor(DType::BF16, {shape.rows, shape.dim}, "E", data.hidden.data());
  if (!data.teacher_hidden.empty())
    p.teacher = device_tensor(DType::BF16, {shape.rows, shape.dim}, "E_teacher",
                              data.teacher_hidden.data());
  p.targets = device_tensor(DType::I32, {shape.rows}, "targets", data.targets.data());
  const float one = 1.f;
  p.grad_loss = device_tensor(DType::F32, {1}, "grad_loss", &one);
  p.loss = device_tensor(DType::F32, {1}, "loss");
  p.row_loss = device_tensor(DType::F32, {shape.rows}, "row_loss");
  p.lse = device_tensor(DType::F32, {shape.rows}, "lse");
  p.kept_rows = data.kept_rows;
  return p;
}

GradOutputs grad_outputs(const CeShape& shape, bool weight_grad_16) {
  GradOutputs g;
  g.tensors.push_back(device_tensor(DType::F32, {shape.rows, shape.dim}, "d_E"));
  const DType dc = weight_grad_16 ? DType::BF16 : DType::F32;  // E is bf16 here
  for (size_t s = 0; s < shape.segments.size(); ++s)
    g.tensors.push_back(
        device_tensor(dc, {shape.segments[s].second, shape.dim}, "d_" + weight_name(s)));
  for (DeviceTensor& t : g.tensors) {
    t.buffer.fill_bytes(0xFF);
    g.bytes += int64_t(t.buffer.bytes());
  }
  g.views.d_hidden = g.tensors[0].view;
  for (size_t s = 1; s < g.tensors.size(); ++s) g.views.d_weight.push_back(g.tensors[s].view);
  return g;
}

}  // namespace tilejit::bench
