#include "runtime/Version.h"

namespace tilejit {
std::string_view version() { return "0.1.0"; }
}  // namespace tilejit
