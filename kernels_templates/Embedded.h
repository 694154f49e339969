// The kernel templates (kernels_templates/*.cuh), embedded into the library at build time
// (cmake/EmbedFiles.cmake) and handed to NVRTC from memory.
#pragma once

#include <span>
#include <string_view>

namespace tilejit {

// The contents of an embedded template by file name ("common.cuh"); empty when there is none.
std::string_view embedded_template(std::string_view file_name);
// Every embedded template's file name, sorted.
std::span<const std::string_view> embedded_template_names();

}  // namespace tilejit
