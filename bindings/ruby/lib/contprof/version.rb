module Contprof
  VERSION = "0.1.0"
end
