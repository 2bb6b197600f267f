# Allocation samples: Poisson over object counts, attributed to the method
# that allocates, unbiased totals.
require_relative "helper"

class TestAlloc < Minitest::Test
  include ContprofTest

  N = 300_000

  # 4 objects per iteration in make_garbage; number_crunch allocates
  # nothing. Mean 100 objects between samples (CONTPROF_ALLOC_SAMPLE_BYTES
  # 4000 / 40-byte slots): about 12000 samples, so the estimate's standard
  # error is about 1%.
  PROGRAM = <<~RUBY
    require "contprof"
    def make_garbage(n); keep = nil; n.times { |i| keep = [i, "s" + i.to_s] }; keep; end
    def number_crunch(n); x = 0; n.times { |i| x += i * 2 }; x; end
    Contprof.start(profiles: %w[alloc], alloc_sample_bytes: 4000)
    number_crunch(#{N})
    make_garbage(#{N})
    Contprof.stop
  RUBY

  def test_allocations_attributed_to_the_allocating_method
    out, err, status, profiles = run_ruby(PROGRAM)
    assert status.success?, "#{out}\n#{err}"
    p = profiles.first
    assert_equal %w[alloc-samples/count alloc-space/bytes], p.types & %w[alloc-samples/count alloc-space/bytes]
    garbage = p.total("alloc-samples/count") { |s| s.stack.include?("Object#make_garbage") }
    crunch = p.total("alloc-samples/count") { |s| s.stack.include?("Object#number_crunch") }
    total = p.total("alloc-samples/count")
    # An Array, the "s" literal, Integer#to_s's String and the sum.
    assert_in_delta 4 * N, garbage, 0.08 * 4 * N
    assert_operator crunch, :<, 0.01 * total
    assert_operator garbage, :>, 0.9 * total
    assert_equal 40 * garbage, p.total("alloc-space/bytes") { |s| s.stack.include?("Object#make_garbage") }
  end
end
