# A small pure-Ruby reader of gzip'd pprof profiles (profile.proto), enough
# for the tests: sample types, samples with stacks (function names, leaf
# first) and labels, comments.
require "zlib"
require "stringio"

class PprofReader
  Sample = Struct.new(:values, :stack, :labels, :num_labels)
  attr_reader :types, :samples, :comments, :strings

  def self.read(path)
    new(Zlib::GzipReader.open(path, &:read))
  end

  def initialize(bytes)
    @strings = []
    @types = []
    raw_samples = []
    locations = {}
    functions = {}
    comment_ids = []
    each_field(bytes) do |field, wire, value|
      case field
      when 1 then @types << message(value)
      when 2 then raw_samples << message(value)
      when 4
        loc = message(value)
        locations[loc[1]&.first || 0] = (loc[4] || []).map { |l| message(l) }
      when 5
        fn = message(value)
        functions[fn[1]&.first || 0] = fn[2]&.first || 0
      when 6 then @strings << value.dup.force_encoding("UTF-8")
      when 13 then comment_ids.concat(wire == 2 ? varints(value) : [value])
      end
    end
    @types = @types.map { |t| "#{@strings[t[1]&.first || 0]}/#{@strings[t[2]&.first || 0]}" }
    @comments = comment_ids.map { |i| @strings[i] }
    @samples = raw_samples.map do |s|
      loc_ids = packed(s[1])
      values = packed(s[2]).map { |v| v >= 2**63 ? v - 2**64 : v }
      stack = loc_ids.flat_map do |id|
        (locations[id] || []).map { |line| @strings[functions[line[1]&.first || 0] || 0] }
      end
      labels = {}
      nums = {}
      (s[3] || []).each do |l|
        lab = message(l)
        key = @strings[lab[1]&.first || 0]
        if lab[2]&.first.to_i != 0
          labels[key] = @strings[lab[2].first]
        else
          nums[key] = lab[3]&.first.to_i
        end
      end
      Sample.new(values, stack, labels, nums)
    end
  end

  def comment(key)
    c = @comments.find { |x| x.start_with?("#{key}=") }
    c && c.split("=", 2)[1]
  end

  def index(type)
    @types.index(type) or raise "no sample type #{type} in #{@types}"
  end

  # Sum of `type` over samples for which the block is true.
  def total(type, &filter)
    i = index(type)
    @samples.select { |s| filter.nil? || filter.call(s) }.sum { |s| s.values[i] }
  end

  private

  def packed(list)
    (list || []).flat_map { |v| v.is_a?(String) ? varints(v) : [v] }
  end

  def message(bytes)
    h = Hash.new { |hash, k| hash[k] = [] }
    each_field(bytes) { |field, _wire, value| h[field] << value }
    h
  end

  def varints(bytes)
    io = StringIO.new(bytes)
    out = []
    out << varint(io) until io.eof?
    out
  end

  def varint(io)
    shift = 0
    result = 0
    loop do
      b = io.readbyte
      result |= (b & 0x7f) << shift
      return result if b < 0x80
      shift += 7
    end
  end

  def each_field(bytes)
    io = StringIO.new(bytes)
    until io.eof?
      key = varint(io)
      field = key >> 3
      wire = key & 7
      value = case wire
              when 0 then varint(io)
              when 1 then io.read(8).unpack1("Q<")
              when 2 then io.read(varint(io))
              when 5 then io.read(4).unpack1("L<")
              else raise "bad wire type #{wire}"
              end
      yield field, wire, value
    end
  end
end
