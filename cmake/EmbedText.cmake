# cmake -DIN=file -DOUT=file.cpp -DSYMBOL=name -P EmbedText.cmake
# Writes a C++ file defining exo::backend::<SYMBOL> as the text of IN.
file(READ ${IN} _text)
file(WRITE ${OUT} "// Generated from ${IN}; do not edit.\n"
  "namespace exo::backend {\n"
  "extern const char* const ${SYMBOL};\n"
  "const char* const ${SYMBOL} = R\"exo_embed(${_text})exo_embed\";\n"
  "}\n")
