// The fused loss's benchmark shapes: the rows of shared PERF.md "Loss targets" (names follow
// the peers' script where it has the shape) and the loss program of each, in text form.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "compiler/Program.h"

namespace tilejit::bench {

struct CeShape {
  std::string name;
  int64_t rows = 8192, dim = 0;
  std::vector<std::pair<int64_t, int64_t>> segments;  // (first global id, size)
  float softcap = 0;                                  // 0: none
  double ignored = 0.1;
  double kl_alpha = 0;  // 0: no KL term; else (1 - alpha) CE + alpha KL(teacher || student)
};

std::vector<CeShape> perf_shapes();

constexpr uint64_t kDataSeed = 17;  // every problem is drawn from this seed

// The program binds segment s's weight as weight_name(s).
std::string weight_name(size_t s);

// One segment per weight, soft-capping (param `cap`), a KL term whose teacher uses the student's
// weights (no teacher layout: "teacher hidden through the same head"), mean over rows.
LossProgram shape_program(const CeShape& shape);

}  // namespace tilejit::bench
