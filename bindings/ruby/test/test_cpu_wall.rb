# CPU and wall profiles: shares of known work across methods and threads, a
# sleeping thread, thread names, GC, and go tool pprof accepting the file.
require "json"
require_relative "helper"

class TestCpuWall < Minitest::Test
  include ContprofTest

  # 2 s of CPU split 60/30/10 across three methods on two threads (which
  # share the GVL), and a thread that sleeps 2.5 s. At 1000 Hz that is about
  # 2000 CPU samples: the shares' sampling error is about 1 point. The
  # sleeper's stack is read once it blocks by the "contprof" Ruby thread,
  # which waits for the GVL behind the two spinning workers (two 100 ms
  # quanta, more on a loaded machine: 0.4 s seen); until then its wall ticks
  # carry the stack it had before it slept. The sleep outlasts the workers so
  # that this lag stays well under a fifth of its wall time.
  PROGRAM = <<~RUBY
    require "contprof"
    #{ContprofTest::SPIN}
    def sixty; spin(1.2); end
    def thirty; spin(0.6); end
    def ten; spin(0.2); end
    def nap; sleep 2.5; end
    def collect; 30.times { GC.start }; end
    Contprof.start(service: "rbtest", profiles: %w[cpu wall], cpu_hz: 1000)
    sleeper = Thread.new do
      Thread.current.name = "sleeper"
      t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      nap
      Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
    end
    a = Thread.new { Thread.current.name = "worker-a"; sixty }
    b = Thread.new { Thread.current.name = "worker-b"; thirty; ten }
    [a, b, sleeper].each(&:join)
    puts sleeper.value # its life: the sleep, then waiting for the GVL
    collect
    Contprof.stop
    require "json"
    puts JSON.generate(Contprof.overhead) # the one profile's period
  RUBY

  # One run shared by the tests below; its directory goes at the end.
  def self.result
    @result ||= begin
      runner = Object.new.extend(ContprofTest)
      Minitest.after_run { runner.cleanup }
      runner.run_ruby(PROGRAM)
    end
  end

  def profile
    out, err, status, profiles, files = self.class.result
    assert status.success?, "#{out}\n#{err}"
    assert_equal 1, profiles.size, err
    @file = files.first
    profiles.first
  end

  def cpu_of(p, method)
    p.total("cpu-time/nanoseconds") { |s| s.stack.include?(method) }
  end

  def test_cpu_shares_across_methods_and_threads
    p = profile
    by = %w[Object#sixty Object#thirty Object#ten].to_h { |m| [m, cpu_of(p, m)] }
    sum = by.values.sum
    assert_operator sum, :>, 1.8e9, by.inspect
    shares = by.transform_values { |v| 100.0 * v / sum }
    assert_in_delta 60, shares["Object#sixty"], 5, shares.inspect
    assert_in_delta 30, shares["Object#thirty"], 5, shares.inspect
    assert_in_delta 10, shares["Object#ten"], 5, shares.inspect
    samples = p.total("cpu-samples/count") { |s| s.stack.include?("Object#sixty") }
    assert_operator samples, :>, 800 # 1000 Hz: a period per ms of CPU
    a = p.total("cpu-time/nanoseconds") { |s| s.labels["thread name"] == "worker-a" }
    b = p.total("cpu-time/nanoseconds") { |s| s.labels["thread name"] == "worker-b" }
    assert_in_delta 1.2e9, a, 0.15e9
    assert_in_delta 0.8e9, b, 0.15e9
  end

  def test_sleeping_thread_has_wall_time_but_no_cpu
    p = profile
    sleeper = ->(s) { s.labels["thread name"] == "sleeper" }
    assert_equal 0, p.total("cpu-samples/count", &sleeper)
    wall = p.total("wall-time/nanoseconds", &sleeper)
    life = self.class.result[0].to_f * 1e9
    assert_operator life, :>=, 2.5e9
    assert_operator wall, :>, 2.4e9
    assert_operator wall, :<, life + 0.25e9
    # A blocked thread's stack comes from Thread#backtrace_locations (method
    # names without their class) or from its own last sample.
    in_sleep = p.total("wall-time/nanoseconds") do |s|
      sleeper.call(s) && %w[Kernel#sleep sleep].include?(s.stack.first) &&
        (s.stack & %w[Object#nap nap]).any?
    end
    assert_operator in_sleep, :>, 0.8 * wall
    worker_wall = p.total("wall-time/nanoseconds") { |s| s.labels["thread name"] == "worker-a" }
    assert_operator worker_wall, :>, 1.0e9
  end

  def test_gc_has_its_own_frame
    p = profile
    gc = p.total("cpu-time/nanoseconds") { |s| s.stack.first == "[GC]" }
    under = p.total("cpu-time/nanoseconds") { |s| s.stack.first == "[GC]" && s.stack.include?("Object#collect") }
    assert_operator gc, :>, 0
    assert_operator under, :>, 0.5 * gc
  end

  # The default (cpu only): no extra Ruby thread; thread-begin hooks find
  # threads started later, which name themselves in their own samples.
  def test_cpu_only_threads_and_names
    out, err, status, profiles = run_ruby(<<~RUBY)
      require "contprof"
      #{ContprofTest::SPIN}
      def solo; spin(0.3); end
      Contprof.start(cpu_hz: 500)
      puts Thread.list.size
      Thread.new { Thread.current.name = "solo"; solo }.join
      Contprof.stop
    RUBY
    assert status.success?, "#{out}\n#{err}"
    assert_equal "1", out.strip
    p = profiles.first
    assert_equal %w[cpu-samples/count cpu-time/nanoseconds], p.types
    solo = p.total("cpu-time/nanoseconds") { |s| s.labels["thread name"] == "solo" && s.stack.include?("Object#solo") }
    assert_operator solo, :>, 0.25e9
  end

  # Contprof.overhead says what the profile's comments say.
  def test_overhead_matches_the_profile
    p = profile
    out, = self.class.result
    o = JSON.parse(out.lines.last)
    %w[profiler_cpu_ns profiler_threads_cpu_ns profiler_hooks_ns
       process_cpu_ns profiler_rss_bytes samples].each do |key|
      assert_equal p.comment(key).to_i, o[key], key
    end
    assert_equal %w[cpu wall], o["profiles"].keys.sort
    o["profiles"].each do |name, s|
      assert_equal p.comment("samples.#{name}").to_i, s["samples"], name
      assert_equal p.comment("profiler_hooks_ns.#{name}").to_i, s["hooks_ns"], name
      assert_equal p.comment("sampling.#{name}").to_f, s["sampling"], name
    end
    assert_operator o["profiles"]["cpu"]["samples"], :>, 100
  end

  def test_metadata
    p = profile
    assert_equal "ruby", p.comment("runtime")
    assert_equal RUBY_VERSION, p.comment("runtime_version")
    assert_equal "rbtest", p.comment("service")
  end

  def test_go_tool_pprof_accepts_the_profile
    profile
    skip "go is not installed" unless system("go version", out: File::NULL, err: File::NULL)
    out, status = Open3.capture2e("go", "tool", "pprof", "-top", @file)
    assert status.success?, out
    assert_match(/Object#sixty/, out)
  end
end
