# Turns a file into a C array (for the flame graph page compiled into
# contprof): cmake -DIN=file -DOUT=header -DNAME=symbol -P embed.cmake
file(READ ${IN} hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," hex "${hex}")
file(WRITE ${OUT} "/* Generated from ${IN} by tools/embed.cmake. */\n"
  "static const char ${NAME}[] = {${hex} 0};\n")
