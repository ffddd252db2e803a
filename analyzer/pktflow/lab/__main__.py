"""python -m pktflow.lab record ...: the lab without the rest of the CLI."""

import argparse
import sys

from pktflow.errors import PktflowError
from pktflow.lab.cli import add_subparser, run

parser = argparse.ArgumentParser(prog="python -m pktflow.lab")
sub = parser.add_subparsers(dest="command", required=True)
add_subparser(sub)
# `python -m pktflow.lab record ...` reads as `lab record ...`
args = parser.parse_args(["lab", *sys.argv[1:]])
try:
    sys.exit(run(args))
except PktflowError as exc:
    print(f"pktflow lab: {exc.one_line()}", file=sys.stderr)
    sys.exit(int(exc.exit_code))
except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM or SIGHUP: everything was cleaned up
    print(f"pktflow lab: interrupted{f' ({exc})' if str(exc) else ''}; servers stopped and "
          "namespaces removed", file=sys.stderr)
    sys.exit(130)
