# Labels and trace correlation on Ruby samples.
require_relative "helper"

class TestLabels < Minitest::Test
  include ContprofTest

  PROGRAM = <<~RUBY
    require "contprof"
    #{ContprofTest::SPIN}
    def checkout; spin(0.4); end
    def browse; spin(0.2); end
    def traced; spin(0.2); end
    Contprof.start(profiles: %w[cpu wall], cpu_hz: 500)
    Contprof.labels(endpoint: "/checkout") do
      Contprof.labels(customer: "42") { checkout }
    end
    t = Thread.new do
      Thread.current.name = "browser"
      Contprof.labels(endpoint: "/browse") { browse; sleep 0.3 }
    end
    t.join
    Contprof.with_span(1234, 99) { traced }
    Contprof.set_endpoint(99, "GET /traced")
    spin(0.1)
    Contprof.stop
  RUBY

  def setup
    out, err, status, profiles = run_ruby(PROGRAM)
    assert status.success?, "#{out}\n#{err}"
    assert_equal 1, profiles.size, err
    @p = profiles.first
  end

  def cpu(&filter)
    @p.total("cpu-time/nanoseconds", &filter)
  end

  def test_labels_scopes_and_threads
    checkout = cpu { |s| s.stack.include?("Object#checkout") }
    labelled = cpu do |s|
      s.stack.include?("Object#checkout") && s.labels["endpoint"] == "/checkout" &&
        s.labels["customer"] == "42"
    end
    assert_operator checkout, :>, 0.3e9
    assert_operator labelled, :>=, 0.95 * checkout
    # The labels end with their blocks.
    leaked = cpu { |s| s.stack.include?("Object#traced") && s.labels.key?("endpoint") }
    assert_equal 0, leaked
    browse = cpu { |s| s.stack.include?("Object#browse") && s.labels["endpoint"] == "/browse" }
    assert_operator browse, :>, 0.15e9
    # Wall samples taken by the ticker carry the blocked thread's labels.
    sleeping = @p.total("wall-time/nanoseconds") do |s|
      s.labels["thread name"] == "browser" && s.labels["endpoint"] == "/browse" &&
        (s.stack & %w[sleep Kernel#sleep]).any?
    end
    assert_operator sleeping, :>, 0.15e9
  end

  def test_options_are_the_environment_variables
    out, err, status, profiles = run_ruby(<<~RUBY, env: {"CONTPROF_SERVICE" => "from-env"})
      require "contprof"
      #{ContprofTest::SPIN}
      Contprof.start(service: "from-keyword", cpu_hz: "fast", tags: {team: "core"},
                     "CONTPROF_ENV" => "staging", bogus: 1)
      spin(0.1) # an empty profile is not written
      Contprof.stop
    RUBY
    assert status.success?, "#{out}\n#{err}"
    p = profiles.first
    assert_equal "from-keyword", p.comment("service")
    assert_equal "staging", p.comment("env")
    assert_equal "core", p.comment("tag.team")
    # The variable's parsing and message: one line, the default.
    assert_match(/contprof: .*CONTPROF_CPU_HZ.*fast/, err)
    assert_equal 1, err.scan(/CONTPROF_CPU_HZ/).size, err
    assert_match(/contprof: unknown option bogus/, err)
  end

  def test_span_ids_and_endpoint
    traced = cpu { |s| s.stack.include?("Object#traced") }
    with_span = cpu do |s|
      s.stack.include?("Object#traced") && s.num_labels["span id"] == 1234 &&
        s.num_labels["local root span id"] == 99 &&
        s.labels["trace endpoint"] == "GET /traced"
    end
    assert_operator traced, :>, 0.15e9
    assert_operator with_span, :>=, 0.95 * traced
    after = cpu { |s| s.stack.first(3).include?("Object#spin") && s.stack[1] == "<main>" && s.num_labels.key?("span id") }
    assert_equal 0, after
  end
end
