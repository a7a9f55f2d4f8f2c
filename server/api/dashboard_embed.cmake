# Writes the file IN as a C array into OUT (server/api/dashboard.h declares it).
# Run at build time: cmake -DIN=server/api/dashboard.html -DOUT=dashboard_html.c -P server/api/dashboard_embed.cmake
file(READ ${IN} hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
file(WRITE ${OUT} "/* Generated from server/api/dashboard.html by server/api/dashboard_embed.cmake. */\n#include \"server/api/dashboard.h\"\n\nconst char colo_dashboard_html[] = {\n${bytes}0};\nconst size_t colo_dashboard_html_len = sizeof colo_dashboard_html - 1;\n")
