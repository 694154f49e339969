# cmake -DNM=nm -DLIBRARY=libtilejit_c.so -P check_exports.cmake
# Fails unless every dynamic symbol the library defines is a tj_ function, and the C ABI's
# entry points are among them.
execute_process(COMMAND ${NM} -D --defined-only ${LIBRARY} OUTPUT_VARIABLE symbols
                RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "${NM} failed on ${LIBRARY}")
endif()
string(REGEX MATCHALL "[^\n]+" lines "${symbols}")
set(exported 0)
foreach(line IN LISTS lines)
  # "<address> <type> <name>[@version]"; the version-script node itself is an absolute symbol.
  if(line MATCHES "^[0-9a-fA-F]+ A ")
    continue()
  endif()
  string(REGEX REPLACE "^[0-9a-fA-F]* *[A-Za-z] " "" name "${line}")
  if(NOT name MATCHES "^tj_")
    message(FATAL_ERROR "${LIBRARY} exports '${name}', which is not part of the C ABI")
  endif()
  math(EXPR exported "${exported} + 1")
endforeach()
foreach(required tj_last_error tj_program_from_text tj_program_segment_count tj_program_reduction
                 tj_program_segment tj_attention_forward tj_linear_ce_backward)
  # The whole name ("tj_program_segment" is also a prefix of "tj_program_segment_count").
  if(NOT symbols MATCHES "[ \t]${required}(@[^\n]*)?(\n|$)")
    message(FATAL_ERROR "${LIBRARY} does not export ${required}")
  endif()
endforeach()
message(STATUS "${LIBRARY}: ${exported} symbols, all tj_")
