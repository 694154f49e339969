/* The installed C ABI from C: parses the same program as main.cpp and prints its hash. */
#include <stdio.h>

#include "tilejit.h"

int main(void) {
  tj_program* program = NULL;
  const char* hash = NULL;
  if (tj_program_from_text("attention causal {\n  mask = q >= kv\n}\n", NULL, &program) != TJ_OK ||
      tj_program_hash(program, &hash) != TJ_OK) {
    fprintf(stderr, "%s\n", tj_last_error());
    return 1;
  }
  printf("tilejit %s: causal %s\n", tj_version(), hash);
  tj_program_destroy(program);
  return 0;
}
