# Shared by the minitest files: builds the extension once (bindings/ruby/
# build.sh into CONTPROF_RUBY_OUT, default /tmp/contprof-ruby-test), runs
# profiled Ruby programs in child processes and decodes their pprof files.
require "minitest/autorun"
require "open3"
require "rbconfig"
require "tmpdir"
require "fileutils"
require_relative "pprof_reader"

module ContprofTest
  HERE = __dir__
  BINDING = File.expand_path("..", HERE)
  ROOT = File.expand_path("../../..", HERE)
  OUT = ENV["CONTPROF_RUBY_OUT"] || "/tmp/contprof-ruby-test-#{Process.uid}"
  RUBY = RbConfig.ruby

  # A CMake build directory of the repository that already has libcontprof.a
  # (BUILD_DIR of scripts/build), else extconf builds the core itself.
  def self.core_build_dir
    [ENV["CONTPROF_BUILD_DIR"], ENV["BUILD_DIR"], File.join(ROOT, "build")]
      .compact.find { |d| File.exist?(File.join(d, "libcontprof.a")) }
  end

  def self.build
    so = File.join(OUT, "lib/contprof/contprof.so")
    inputs = Dir[File.join(BINDING, "ext/contprof/*")]
    core = core_build_dir
    inputs << File.join(core, "libcontprof.a") if core
    fresh = File.exist?(so) && inputs.all? { |f| File.mtime(f) <= File.mtime(so) }
    return if fresh
    FileUtils.mkdir_p(OUT)
    File.open(File.join(OUT, ".lock"), File::CREAT | File::RDWR) do |lock|
      lock.flock(File::LOCK_EX)
      env = {"CONTPROF_RUBY_OUT" => OUT}
      env["CONTPROF_BUILD_DIR"] = core if core
      out, status = Open3.capture2e(env, File.join(BINDING, "build.sh"))
      raise "bindings/ruby/build.sh failed:\n#{out}" unless status.success?
    end
  end
  build

  LOAD = ["-I", File.join(BINDING, "lib"), "-I", File.join(OUT, "lib")].freeze

  # Runs `script` (Ruby source) with the binding loadable; returns
  # [stdout, stderr, status, profiles] with profiles the decoded files it
  # wrote into its own output directory (sorted by name).
  def run_ruby(script, env: {}, timeout: 60)
    dir = Dir.mktmpdir("contprof-rb")
    path = File.join(dir, "prog.rb")
    File.write(path, script)
    full_env = {"CONTPROF_OUTPUT_DIR" => File.join(dir, "profiles"),
                "CONTPROF_UPLOAD_PERIOD" => "3600"}.merge(env)
    out, err, status = Open3.capture3(full_env, RUBY, *LOAD, path,
                                      chdir: dir)
    files = Dir[File.join(dir, "profiles", "*.pb.gz")].sort
    [out, err, status, files.map { |f| PprofReader.read(f) }, files]
  ensure
    @dirs ||= []
    @dirs << dir if dir
  end

  def cleanup
    (@dirs || []).each { |d| FileUtils.rm_rf(d) }
    @dirs = []
  end

  def after_teardown
    cleanup
    super
  end

  # A CPU-bound method body: spins until this thread has used `seconds` of
  # CPU time, so that the true split between methods is known exactly.
  SPIN = <<~RUBY
    def spin(seconds)
      stop = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) + seconds
      x = 0
      while Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) < stop
        200.times { x += 1 }
      end
      x
    end
  RUBY
end
