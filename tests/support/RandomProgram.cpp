#include "tests/support/RandomProgram.h"
// Implementation pending (compiler passes work).
