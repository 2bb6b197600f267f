#!/usr/bin/env bash
# cmake --install lays out bin/, lib/, include/contprof/, pkg-config and the
# CMake package; a service builds against it with find_package(contprof) and
# with pkg-config, runs, and writes a profile with its labels.
set -euo pipefail
src=$1 build=$2
tmp=$(mktemp -d /tmp/contprof-install.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
for f in bin/contprof include/contprof/profiler.h include/contprof/runtime.h \
         lib/libcontprof.so lib/libcontprof.a lib/libcontprof_preload.so \
         lib/pkgconfig/contprof.pc lib/cmake/contprof/contprofConfig.cmake; do
  test -e "$tmp/prefix/$f" || { echo "missing $f"; exit 1; }
done
# No clash with gperftools: nothing named profiler.h at the top of include/.
test ! -e "$tmp/prefix/include/profiler.h"

cmake -S "$src/examples/linked_service" -B "$tmp/svc" \
  -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/svc" >/dev/null
(cd "$tmp" && LD_LIBRARY_PATH="$tmp/prefix/lib" "$tmp/svc/linked_service" 150)
ls "$tmp"/profiles/linked-service.*.pb.gz >/dev/null
"$tmp/prefix/bin/contprof" top "$tmp"/profiles/*.pb.gz | tee "$tmp/top.txt"
grep -q handle_checkout "$tmp/top.txt"

# pkg-config works too.
PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig" \
  cc "$src/examples/linked_service/service.c" -o "$tmp/svc-pc" \
  $(PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig" pkg-config --cflags --libs contprof)
# The installed contprof run finds its preload library in ../lib.
(cd "$tmp" && "$tmp/prefix/bin/contprof" run --output "$tmp/run" -- /bin/true)
echo "install layout, find_package, pkg-config: ok"
