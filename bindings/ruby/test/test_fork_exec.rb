# fork: the child profiles itself (own pid, runtime-id, no parent samples);
# exec: stops cleanly, no timer signal reaches the new image.
require_relative "helper"

class TestForkExec < Minitest::Test
  include ContprofTest

  FORK = <<~RUBY
    require "contprof"
    #{ContprofTest::SPIN}
    def parent_work; spin(0.3); end
    def child_work; spin(0.3); end
    Contprof.start(profiles: %w[cpu wall], cpu_hz: 500)
    parent_work
    pid = fork do
      child_work
      t = Thread.new { spin(0.1) } # threads started in the child are sampled
      t.join
    end
    Process.wait(pid)
    exit 3 unless $?.success?
    puts pid
    Contprof.stop
  RUBY

  def test_fork_child_profiles_itself
    out, err, status, profiles = run_ruby(FORK)
    assert status.success?, "#{out}\n#{err}"
    assert_equal 2, profiles.size, err
    child_pid = out.to_i
    child, parent = profiles.partition { |p| p.comment("process_id").to_i == child_pid }.map(&:first)
    refute_nil child, profiles.map { |p| p.comment("process_id") }.inspect
    refute_nil parent
    refute_equal child.comment("runtime-id"), parent.comment("runtime-id")
    cpu = "cpu-time/nanoseconds"
    assert_operator parent.total(cpu) { |s| s.stack.include?("Object#parent_work") }, :>, 0.2e9
    assert_equal 0, parent.total(cpu) { |s| s.stack.include?("Object#child_work") }
    assert_operator child.total(cpu) { |s| s.stack.include?("Object#child_work") }, :>, 0.2e9
    assert_equal 0, child.total(cpu) { |s| s.stack.include?("Object#parent_work") }
    assert_equal 0, child.total("wall-samples/count") { |s| s.stack.include?("Object#parent_work") }
    in_thread = child.total(cpu) { |s| s.stack.include?("Object#spin") && !s.stack.include?("Object#child_work") }
    assert_operator in_thread, :>, 0.05e9
  end

  def test_daemon_profiles_itself
    out_dir = Dir.mktmpdir("contprof-daemon")
    out, err, status, = run_ruby(<<~RUBY, env: {"CONTPROF_OUTPUT_DIR" => out_dir})
      require "contprof"
      #{ContprofTest::SPIN}
      def daemon_work; spin(0.3); end
      Contprof.start(cpu_hz: 500)
      Process.daemon(true, true)
      daemon_work
      File.write(File.join(#{out_dir.dump}, "pid"), $$.to_s)
    RUBY
    assert status.success?, "#{out}\n#{err}"
    pid_file = File.join(out_dir, "pid")
    profile = nil
    100.times do
      pid = File.exist?(pid_file) && File.read(pid_file).to_i
      profile = pid && Dir[File.join(out_dir, "*.#{pid}.*.pb.gz")].first
      break if profile # written under a temporary name, then moved into place
      sleep 0.1
    end
    refute_nil profile, Dir.children(out_dir).inspect
    p = PprofReader.read(profile)
    assert_operator p.total("cpu-time/nanoseconds") { |s| s.stack.include?("Object#daemon_work") }, :>, 0.2e9
  ensure
    FileUtils.rm_rf(out_dir) if out_dir
  end

  EXEC = <<~RUBY
    require "contprof"
    #{ContprofTest::SPIN}
    Contprof.start(profiles: %w[cpu wall alloc], cpu_hz: 1000, wall_interval_ms: 1)
    t = Thread.new { loop { spin(0.001) } }
    spin(0.15)
    begin
      exec("/nonexistent/program")
    rescue SystemCallError
      # A failed exec restarts the profiler.
      exit 4 unless Contprof.running?
    end
    spin(0.05)
    exec("/bin/true")
  RUBY

  def test_exec_stops_cleanly
    3.times do
      out, err, status, profiles = run_ruby(EXEC)
      assert status.success?, "status #{status.inspect}\n#{out}\n#{err}"
      refute_match(/Profiling timer expired|Real-time signal/, err)
      # Before each exec the last profile is written.
      assert_equal 2, profiles.size, err
    end
  end
end
