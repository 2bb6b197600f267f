# In-process paired blocks for bench/ruby_overhead.sh: one Ruby process runs
# ruby_work in back-to-back blocks, profiled (Contprof.start ... stop around
# the block, at the defaults) and not, in alternating order, so that both
# sides of a pair see the same machine. Prints one line per pair:
# "off_cpu on_cpu off2_cpu" (process CPU seconds of the block; off2 is a
# second unprofiled block: the A/A control). Start and stop (the last
# profile's write) are outside the timed blocks.
require "contprof"
require_relative "ruby_work"

pairs = Integer(ARGV[0] || 30)
rounds = Integer(ARGV[1] || 20)
dir = ARGV[2] || "/tmp/contprof-ruby-inproc"

def timed(rounds)
  c0 = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
  ruby_work(rounds)
  Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - c0
end

ruby_work(rounds) # warm-up
pairs.times do |i|
  r = {}
  %i[off on off2].rotate(i % 3).each do |v|
    if v == :on
      Contprof.start(output_dir: dir) or abort "contprof did not start"
      r[v] = timed(rounds)
      Contprof.stop
    else
      r[v] = timed(rounds)
    end
  end
  puts format("%.6f %.6f %.6f", r[:off], r[:on], r[:off2])
end
