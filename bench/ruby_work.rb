# A CPU-bound Ruby program for bench/ruby_overhead.sh: a fixed amount of
# typical interpreter work (method calls, blocks, Hash/String/Array churn),
# ~30-frame stacks. Run directly, it prints "work_wall_s work_cpu_s" for the
# work alone; loaded, it defines `ruby_work(rounds)`.
def fib(n) = n < 2 ? n : fib(n - 1) + fib(n - 2)

def churn(n)
  h = {}
  n.times { |i| h["k#{i % 512}"] = [i, i.to_s].join(":") }
  h.size
end

def nest(depth, &blk) = depth.zero? ? blk.call : nest(depth - 1, &blk)

def ruby_work(rounds)
  sum = 0
  rounds.times do
    sum += nest(20) { fib(20) }
    sum += nest(20) { churn(4000) }
  end
  sum
end

if $PROGRAM_NAME == __FILE__
  rounds = Integer(ARGV[0] || 40)
  t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  c0 = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
  sum = ruby_work(rounds)
  t1 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  c1 = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
  warn "checksum #{sum}" if sum.zero?
  puts format("%.6f %.6f", t1 - t0, c1 - c0)
end
