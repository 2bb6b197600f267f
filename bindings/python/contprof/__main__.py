"""python3 -m contprof [options] script.py args... (or -m module args...):
runs a script under the profiler, like python3 -m cProfile. Options not
given here come from the environment (docs/configuration.md)."""
import argparse
import os
import runpy
import sys

import contprof


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python3 -m contprof",
        usage="%(prog)s [options] (script.py | -m module) [args...]",
        description="Run a Python program under contprof.")
    parser.add_argument("--service", help="CONTPROF_SERVICE")
    parser.add_argument("--env", help="CONTPROF_ENV")
    parser.add_argument("--version", dest="app_version",
                        help="CONTPROF_VERSION")
    parser.add_argument("--tags", help="CONTPROF_TAGS, k1:v1,k2:v2")
    parser.add_argument("--profiles", help="CONTPROF_PROFILES, e.g. "
                        "cpu,wall,alloc,heap")
    parser.add_argument("--hz", type=int, help="CONTPROF_CPU_HZ")
    parser.add_argument("--output", help="CONTPROF_OUTPUT_DIR")
    parser.add_argument("--period", type=int, help="CONTPROF_UPLOAD_PERIOD")
    parser.add_argument("-m", dest="module", help="run a library module")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    ns = parser.parse_args(argv)
    if not ns.module and not ns.args:
        parser.error("a script (or -m module) is required")

    contprof.start(service=ns.service, env=ns.env, version=ns.app_version,
                   tags=ns.tags, profiles=ns.profiles, cpu_hz=ns.hz,
                   output_dir=ns.output, upload_period=ns.period)
    try:
        if ns.module:
            sys.argv = [ns.module] + ns.args
            runpy.run_module(ns.module, run_name="__main__", alter_sys=True)
        else:
            script = ns.args[0]
            sys.argv = ns.args
            sys.path[0] = os.path.dirname(os.path.abspath(script))
            runpy.run_path(script, run_name="__main__")
    finally:
        contprof.stop()


if __name__ == "__main__":
    main()
