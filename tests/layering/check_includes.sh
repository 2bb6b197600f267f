#!/usr/bin/env bash
# The include rules of docs/architecture.md ("What may include what"),
# checked over the source tree: dependencies point down the data path
# (interpose -> samplers -> aggregator -> scheduler -> exporter -> upload), the
# aggregator knows no sampler and no sink, sinks know no sampler and no
# aggregator, and only the core (profiler.c) and the interposition layer reach
# into the samplers (the Python and Ruby bindings use include/contprof).
# Prints each include that breaks a rule and fails when there is one.
#
#   tests/layering/check_includes.sh [SOURCE_ROOT]
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root"

# layer FILE: the layer a source file belongs to.
layer() {
  case $1 in
  src/interpose/*) echo interpose ;;
  src/samplers/*) echo samplers ;;
  src/aggregator/*) echo aggregator ;;
  src/exporter/*) echo exporter ;;
  src/upload/*) echo upload ;;
  src/scheduler.*) echo scheduler ;;
  src/profiler.c | src/profiler_internal.h | src/exec.[ch]) echo core ;;
  src/*) echo shared ;;
  tools/*) echo tools ;;
  bindings/*) echo bindings ;;
  esac
}

# target INCLUDE: the layer an included header belongs to ("" for the
# public headers and the system's).
target() {
  case $1 in
  interpose/*) echo interpose ;;
  samplers/*) echo samplers ;;
  aggregator/*) echo aggregator ;;
  exporter/*) echo exporter ;;
  upload/*) echo upload ;;
  scheduler.h) echo scheduler ;;
  profiler_internal.h | exec.h) echo core ;;
  contprof/* | *.pb-c.h) echo "" ;;
  *) echo shared ;;
  esac
}

# allowed FROM TO: whether layer FROM may include a header of layer TO.
allowed() {
  local from=$1 to=$2
  [[ -z $to || $from == "$to" || $to == shared ]] && return 0
  case $from in
  core) return 0 ;;
  interpose) [[ $to == samplers || $to == core ]] ;;
  samplers) [[ $to == aggregator ]] ;;
  aggregator) return 1 ;;
  scheduler) [[ $to == aggregator || $to == exporter || $to == upload ]] ;;
  exporter) [[ $to == aggregator ]] ;;
  upload) [[ $to == exporter ]] ;;
  tools) [[ $to == aggregator || $to == exporter ]] ;;
  bindings) return 1 ;; # the public API (include/contprof) and shared only
  shared) return 1 ;;
  *) return 1 ;;
  esac
}

bad=0
while IFS= read -r file; do
  from=$(layer "$file")
  [[ -n $from ]] || continue
  # A header in the same folder is named without its folder.
  dir=${file%/*}
  while IFS= read -r inc; do
    if [[ $inc != */* && -f $dir/$inc && $dir != src ]]; then
      to=$from
    else
      to=$(target "$inc")
    fi
    # upload/ may include exporter/export.h only (a finished export), no
    # other exporter header and no aggregator header.
    if [[ $from == upload && $to == exporter && $inc != exporter/export.h ]]; then
      echo "$file: includes $inc (sinks see only exporter/export.h)"
      bad=1
    elif [[ $from == samplers && $to == interpose && $inc == interpose/real.h ]]; then
      # The one upward include: the real libc functions and the layer's
      # resolve-now calls (a sampler's start), never a hook.
      continue
    elif ! allowed "$from" "$to"; then
      echo "$file: $from includes $inc ($to)"
      bad=1
    fi
  done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$file")
done < <(find src tools bindings -name '*.[ch]' | sort)
if ((bad)); then
  echo "check_includes: the includes above break docs/architecture.md's rules" >&2
  exit 1
fi
echo "check_includes: every include follows docs/architecture.md's rules"
