# Builds the contprof extension: libcontprof (the C core) is built with CMake
# from the sources next to this gem (vendor/contprof in the gem, the
# repository in a checkout), or taken from CONTPROF_BUILD_DIR (a CMake build
# directory of the repository with libcontprof.a), and linked statically. Only
# Init_contprof is exported: the core's interposers (malloc, pthread_create,
# sigaction...) stay local to the extension.
require "mkmf"
require "fileutils"

here = __dir__
source = [File.expand_path("../../vendor/contprof", here),
          File.expand_path("../../../..", here)].find do |dir|
  File.exist?(File.join(dir, "CMakeLists.txt")) &&
    File.exist?(File.join(dir, "include/contprof/runtime.h"))
end
abort "contprof: the contprof C sources were not found" unless source

build = ENV["CONTPROF_BUILD_DIR"]
if build.nil? || build.empty?
  build = File.join(Dir.pwd, "libcontprof-build")
  find_executable("cmake") or abort "contprof: cmake is needed to build the gem"
  FileUtils.mkdir_p(build)
  ok = system("cmake", "-S", source, "-B", build,
              "-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DCONTPROF_BUILD_TESTS=OFF",
              out: File::NULL) &&
       system("cmake", "--build", build, "--target", "contprof_static",
              "-j", (ENV["CONTPROF_JOBS"] || "2"), out: File::NULL)
  abort "contprof: building libcontprof with CMake failed" unless ok
end
archive = File.join(build, "libcontprof.a")
abort "contprof: #{archive} is missing" unless File.exist?(archive)

$INCFLAGS << " -I#{File.join(source, 'include')}"
# random.h: the core's random source, shared with the extension's samplers.
$INCFLAGS << " -I#{File.join(source, 'src')}"
$CFLAGS << " -std=gnu11 -Wall -Wextra"
$defs << "-D_GNU_SOURCE"
%w[libunwind libprotobuf-c libcurl].each do |pkg|
  pkg_config(pkg) or abort "contprof: #{pkg} (pkg-config) is needed"
end
map = File.join(Dir.pwd, "contprof.map")
File.write(map, "{ global: Init_contprof; local: *; };\n")
$LOCAL_LIBS << " #{archive}"
$libs << " -lz -lpthread -ldl -lm"
$LDFLAGS << " -Wl,--exclude-libs,ALL -Wl,--version-script=#{map}"
create_makefile("contprof/contprof")
