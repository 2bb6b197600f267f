require_relative "lib/contprof/version"

Gem::Specification.new do |s|
  s.name = "contprof"
  s.version = Contprof::VERSION
  s.summary = "Always-on profiler for Ruby: CPU, wall and allocation profiles " \
              "with Ruby frames, as pprof files or uploads"
  s.authors = ["contprof"]
  s.license = "Apache-2.0"
  s.required_ruby_version = ">= 3.1"
  s.files = Dir["lib/**/*.rb", "ext/**/*.{c,rb}", "vendor/contprof/**/*",
                "README.md"].reject { |f| File.directory?(f) }
  s.extensions = ["ext/contprof/extconf.rb"]
  s.require_paths = ["lib"]
end
