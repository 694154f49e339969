// Programs: what a user describes. An attention program is a mask and a score modifier over
// (b, h, q, kv); a loss program is a vocabulary layout plus the loss terms. Both carry the
// captured buffers and runtime params their expressions read. Programs are plain values; their
// identity is the sha256 of their canonical text (compiler/Printer.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compiler/IR.h"

namespace tilejit {

// A captured tensor: bound at launch, never baked into a kernel. `dims` names each dimension
// (e.g. {"B", "S"}); the same name in two buffers must bind to the same size.
struct BufferDecl {
  std::string name;
  ElemType elem = ElemType::I32;
  std::vector<std::string> dims;
};

// A runtime scalar (f32 or i32).
struct ParamDecl {
  std::string name;
  Type type = Type::F32;
};

struct AttentionProgram {
  std::string name;
  std::vector<BufferDecl> buffers;
  std::vector<ParamDecl> params;
  Expr mask;   // bool over b, h, q, kv; defaults to `true`
  Expr score;  // f32 over score, b, h, q, kv; defaults to `score`

  AttentionProgram();
  const BufferDecl* find_buffer(std::string_view n) const;
  const ParamDecl* find_param(std::string_view n) const;
};

// A vocabulary segment: global ids [begin, end) map to rows 0..end-begin-1 of `weight`
// (and of `bias`, when named).
struct Segment {
  std::string name;
  int64_t begin = 0;
  int64_t end = 0;
  std::string weight;
  std::string bias;  // empty: no bias
  int64_t size() const { return end - begin; }
};

enum class Reduction : uint8_t { None, Sum, Mean };
std::string_view reduction_name(Reduction r);

// KL(teacher || student) at temperature T, blended as (1-alpha)*CE + alpha*KL. The teacher's
// logits come from teacher hidden states through `teacher_segments` (empty: the student's
// layout and weights).
struct KlTerm {
  double alpha = 0;
  double temperature = 1;
  std::vector<Segment> teacher_segments;
};

struct LossProgram {
  std::string name;
  std::vector<BufferDecl> buffers;
  std::vector<ParamDecl> params;
  std::vector<Segment> segments;  // sorted by begin, non-overlapping (validated)
  Expr logit;                     // f32 over logit, row, id; defaults to `logit`
  double label_smoothing = 0;     // eps, uniform over live ids
  double z_loss = 0;              // lambda * lse^2
  std::optional<KlTerm> kl;
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::Mean;

  LossProgram();
  const BufferDecl* find_buffer(std::string_view n) const;
  const ParamDecl* find_param(std::string_view n) const;
  int64_t vocab_end() const;   // one past the largest live id
  int64_t live_ids() const;    // sum of segment sizes
};

}  // namespace tilejit
