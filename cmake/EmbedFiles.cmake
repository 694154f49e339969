# tilejit_embed_files(TARGET OUT_CPP NAMESPACE_FN FILES...): compile text files into the library
# as string literals, so nothing is read from disk at run time. (Implemented with the templates.)
