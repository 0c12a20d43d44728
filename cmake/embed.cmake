# cmake -DIN=file -DOUT=file.c -DSYMBOL=name -P embed.cmake
# Writes `const char NAME[]` holding IN's bytes and a terminating NUL.
file(READ ${IN} hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n  "
       bytes "${bytes}")
file(WRITE ${OUT} "/* Generated from ${IN}; do not edit. */\nconst char ${SYMBOL}[] = {\n  ${bytes}0x00};\n")
