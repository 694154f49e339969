# Sourced by bench/gpu_check.sh and bench/gpu_binaries.sh: hashes of the tree's sources (sorted
# in the C locale, so that hosts with other locales agree).
#   source_hash:       every file a build or a step reads (a kept build tree is rebuilt when it
#                      moves)
#   binaries_sources:  one md5sum line per file compiled into the binaries and harnesses (the
#                      kernel templates are embedded at build time), of the bench only its C++
#                      sources, so that prebuilt binaries stay valid across edits to its notes,
#                      scripts and patches
#   binaries_hash:     the hash of those lines
source_hash() {
  find CMakeLists.txt cmake compiler runtime kernels_templates capi dsl tools tests bench \
    examples python -type f -print0 2>/dev/null | LC_ALL=C sort -z | xargs -0 md5sum | md5sum |
    cut -d' ' -f1
}
binaries_sources() {
  find CMakeLists.txt cmake compiler runtime kernels_templates capi dsl tools tests bench \
    \( -name __pycache__ -o -name 'build*' -type d \) -prune -o -type f ! -name '*.md' \
    ! -name '*.py' ! -name '*.png' ! -name '*.swp' \
    ! \( -path 'bench/*' ! -name '*.cpp' ! -name '*.h' ! -name CMakeLists.txt \) -print0 \
    2>/dev/null | LC_ALL=C sort -z | xargs -0 md5sum
}
binaries_hash() { binaries_sources | md5sum | cut -d' ' -f1; }
