# Packaging: `gem build` and an offline `gem install --local` into a GEM_HOME
# under /tmp (the system is not touched), then `ruby -rcontprof/auto` and
# RUBYOPT starting the profiler from the environment.
require_relative "helper"

class TestGem < Minitest::Test
  include ContprofTest

  def test_gem_build_install_and_auto
    Dir.mktmpdir("contprof-gem") do |dir|
      out_dir = File.join(dir, "out")
      # build.sh stages the gem with the core's sources (vendor/contprof).
      env = {"CONTPROF_RUBY_OUT" => out_dir}
      env["CONTPROF_BUILD_DIR"] = ContprofTest.core_build_dir if ContprofTest.core_build_dir
      log, status = Open3.capture2e(env, File.join(BINDING, "build.sh"), "gem")
      assert status.success?, log
      gem = File.join(out_dir, "contprof.gem")
      assert File.exist?(gem), log

      # The install builds libcontprof from the gem's own sources with CMake:
      # no CONTPROF_BUILD_DIR, no network.
      home = File.join(dir, "gemhome")
      gem_env = {"GEM_HOME" => home, "GEM_PATH" => home, "CONTPROF_BUILD_DIR" => nil,
                 "BUILD_DIR" => nil, "http_proxy" => "http://127.0.0.1:9", "https_proxy" => "http://127.0.0.1:9"}
      log, status = Open3.capture2e(gem_env, "gem", "install", "--local", "--no-document", gem)
      assert status.success?, log
      so = Dir[File.join(home, "gems/contprof-*/lib/contprof/contprof.so")].first
      refute_nil so, log
      exported, = Open3.capture2("nm", "-D", "--defined-only", so)
      assert_equal ["Init_contprof"], exported.lines.map { |l| l.split.last }

      prog = "def work; x = 0; 3_000_000.times { x += 1 }; x; end; work"
      [["-rcontprof/auto", "-e", prog], ["-e", prog]].each_with_index do |args, i|
        profiles = File.join(dir, "profiles#{i}")
        run_env = gem_env.merge("CONTPROF_OUTPUT_DIR" => profiles, "CONTPROF_SERVICE" => "autotest",
                                "CONTPROF_CPU_HZ" => "500")
        run_env["RUBYOPT"] = "-rcontprof/auto" if i == 1
        out, status = Open3.capture2e(run_env, RUBY, *args, chdir: dir)
        assert status.success?, out
        files = Dir[File.join(profiles, "autotest.*.pb.gz")]
        assert_equal 1, files.size, out
        p = PprofReader.read(files.first)
        assert_equal "ruby", p.comment("runtime")
        assert_operator p.total("cpu-samples/count") { |s| s.stack.include?("Object#work") }, :>, 10
      end
    end
  end
end
