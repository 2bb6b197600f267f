#!/usr/bin/env bash
# Builds the extension without installing anything:
#   bindings/ruby/build.sh            -> $CONTPROF_RUBY_OUT/lib/contprof/contprof.so
#   bindings/ruby/build.sh gem        -> also $CONTPROF_RUBY_OUT/contprof-VERSION.gem
# CONTPROF_RUBY_OUT defaults to /tmp/contprof-ruby. CONTPROF_BUILD_DIR (a CMake
# build directory with libcontprof.a) skips building the core. Use the result
# with `ruby -I bindings/ruby/lib -I $CONTPROF_RUBY_OUT/lib`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${CONTPROF_RUBY_OUT:-/tmp/contprof-ruby}
ruby=${RUBY:-/usr/bin/ruby}
mkdir -p "$out/ext" "$out/lib/contprof"
(cd "$out/ext" && { "$ruby" "$here/ext/contprof/extconf.rb" &&
  make -s; } >make.log 2>&1 || { cat make.log; exit 1; })
grep -E 'warning:' "$out/ext/make.log" || true
cp "$out/ext/contprof.so" "$out/lib/contprof/contprof.so"
if [ "${1:-}" = gem ]; then
  # The gem carries the core's sources (vendor/contprof) so that
  # `gem install` builds it offline, with nothing else to fetch.
  stage="$out/stage"
  rm -rf "$stage"
  mkdir -p "$stage/vendor/contprof"
  cp -r "$here/contprof.gemspec" "$here/lib" "$here/ext" "$stage/"
  cp -r "$root/CMakeLists.txt" "$root/cmake" "$root/include" "$root/src" \
    "$root/preload" "$root/tools" "$root/examples" "$stage/vendor/contprof/"
  cp "$root/docs/ruby.md" "$stage/README.md" 2>/dev/null || true
  (cd "$stage" && gem build contprof.gemspec --output "$out/contprof.gem" >/dev/null)
  echo "$out/contprof.gem"
fi
