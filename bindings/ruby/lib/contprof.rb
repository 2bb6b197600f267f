# contprof for Ruby: an always-on profiler that samples Ruby frames (CPU,
# wall, allocations) and writes or uploads pprof profiles with libcontprof.
#
#   require "contprof"
#   Contprof.start(service: "shop", env: "prod", profiles: %w[cpu wall])
#   Contprof.labels(endpoint: "/checkout") { handle(request) }
#
# Every keyword of Contprof.start is an environment variable of
# docs/configuration.md: `service:` is CONTPROF_SERVICE, `cpu_hz:` is
# CONTPROF_CPU_HZ, `wall_interval_ms:` is CONTPROF_WALL_INTERVAL_MS, and a
# String key ("DD_ENV" => "prod") is taken as the variable's name. A keyword
# wins over the environment; values are parsed, checked and defaulted exactly
# as the variables are (a bad one gives one `contprof:` line and the default).
require "contprof/version"
require "contprof/contprof"

module Contprof
  # The keywords of Contprof.start: CONTPROF_<KEYWORD> variables of
  # docs/configuration.md. A String key is passed as a variable name as is.
  OPTIONS = %i[
    enabled service env version tags profiles cpu_hz max_frames upload_period
    output_dir log_level max_memory_mb wall_interval_ms wall_threads_per_tick
    timeline follow_fork follow_exec alloc_sample_bytes heap_max_tracked
    lock_sample_ns export upload_timeout connect_timeout exit_timeout
    retry_initial retry_max spool_dir spool_max datadog_intake_url
  ].freeze

  @lock = Mutex.new
  @options = nil
  @at_exit = false

  class << self
    # Starts profiling. Returns true, or false when profiling is disabled
    # (CONTPROF_ENABLED=false) or already running.
    def start(**options)
      env = options.each_with_object({}) do |(key, value), h|
        next if value.nil?
        if key.is_a?(Symbol) && !OPTIONS.include?(key)
          warn "contprof: unknown option #{key}: ignored (see docs/configuration.md)"
          next
        end
        h[env_name(key)] = env_value(value)
      end
      @lock.synchronize do
        started = Native.start(env)
        if started
          @options = env
          unless @at_exit
            @at_exit = true
            at_exit { Contprof.stop if Contprof.running? }
          end
        end
        started
      end
    end

    # Stops sampling and writes (or uploads) the last profile. Returns false
    # when not running.
    def stop
      @lock.synchronize do
        stopped = Native.stop
        @options = nil
        stopped
      end
    end

    # Ends the current period: the samples so far become one profile.
    def flush
      Native.flush
    end

    def running?
      Native.running?
    end

    # What the profiler cost in the period of the last profile written
    # (zeros before the first), or with since_start: true summed since it
    # started: a Hash named like the profiles' comments (docs/overhead.md),
    # with each profile type's figures under "profiles" (samples, drops,
    # thinned, hooks_ns, kernel_ns, threads_cpu_ns, sampling: the rate in
    # force, slowdown, slowdown_max).
    def overhead(since_start: false)
      Native.overhead(since_start)
    end

    # Labels every sample taken on this thread inside the block:
    #   Contprof.labels(endpoint: "/checkout", customer: "42") { ... }
    # Labels are per native thread (not per Fiber) and nest.
    def labels(**labels)
      tokens = []
      labels.each { |k, v| tokens << Native.label_push(k.to_s, v.to_s) }
      yield
    ensure
      tokens&.reverse_each { |t| Native.label_pop(t) }
    end

    # Trace correlation: samples of this thread carry `span id` and
    # `local root span id` until the next call; set_span(0, 0) clears.
    def set_span(span_id, local_root_span_id = span_id)
      Native.set_span(span_id.to_i, local_root_span_id.to_i)
    end

    # set_span for the duration of the block, then the previous ids again.
    def with_span(span_id, local_root_span_id = span_id)
      previous = Native.current_span
      set_span(span_id, local_root_span_id)
      yield
    ensure
      Native.set_span(*previous) if previous
    end

    # Names the endpoint (resource) of a local root span: its samples get a
    # `trace endpoint` label, and the request counts in endpoint_counts.
    def set_endpoint(local_root_span_id, endpoint)
      Native.set_endpoint(local_root_span_id.to_i, endpoint.to_s)
    end

    # Kernel#exec / Process.exec: stops cleanly (timers gone, last profile
    # written) before the new image replaces this one; restarts if exec fails.
    def around_exec
      options = @lock.synchronize { running? ? @options : nil }
      return yield unless options
      stop
      begin
        yield
      rescue Exception
        start_env(options)
        raise
      end
    end

    private

    def start_env(env)
      @lock.synchronize do
        @options = env if Native.start(env)
      end
    end

    def env_name(key)
      return key if key.is_a?(String)
      "CONTPROF_#{key.to_s.upcase}"
    end

    def env_value(value)
      case value
      when Array then value.map(&:to_s).join(",")
      when Hash then value.map { |k, v| "#{k}:#{v}" }.join(",")
      else value.to_s
      end
    end
  end

  # Process._fork (Ruby 3.1+) is what fork, Process.fork and IO.popen("-")
  # call: the child restarts its own sampling (the core restarted itself with
  # a new pid and runtime-id from its atfork handler).
  module ForkHook
    def _fork
      pid = super
      Contprof::Native.after_fork_child if pid == 0
      pid
    end

    # Process.daemon forks without Process._fork; it returns in the daemon.
    def daemon(*args)
      result = super
      Contprof::Native.after_fork_child
      result
    end
  end

  module ExecHook
    def exec(*args, **opts)
      Contprof.around_exec { super }
    end
  end

  module KernelExecHook
    private

    def exec(*args, **opts)
      Contprof.around_exec { super }
    end
  end
end

Process.singleton_class.prepend(Contprof::ForkHook) if Process.respond_to?(:_fork)
Process.singleton_class.prepend(Contprof::ExecHook)
Kernel.singleton_class.prepend(Contprof::ExecHook)
Kernel.prepend(Contprof::KernelExecHook)
