# `ruby -rcontprof/auto app.rb` (or RUBYOPT=-rcontprof/auto): starts the
# profiler from the environment (CONTPROF_*, DD_*, PYROSCOPE_*; see
# docs/configuration.md). CONTPROF_ENABLED=false leaves it off.
require "contprof"

Contprof.start
