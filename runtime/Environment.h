// Integer settings read from the environment, for measuring and testing: the Hopper attention's
// band and backward grid (runtime/AttentionSchedule.h), the fused loss's row groups
// (runtime/LinearCeState.h), what the workspace pool keeps (runtime/WorkspacePool.h). The
// attention band and the pool's setting are read once per process, the others at every call.
#pragma once

#include <cstdint>

namespace tilejit {

// The integer in environment variable `name`, within [lo, hi]; `unset` when it is unset or empty.
// Anything else (not a whole number, out of range) is a UserError naming the variable.
int64_t env_integer(const char* name, int64_t lo, int64_t hi, int64_t unset);

}  // namespace tilejit
